//! Tools that ship with toolgate.

mod bash;
mod echo;
mod files;
mod wait;

pub use bash::Bash;
pub use echo::Echo;
pub use files::{
    ApplyDiff, EditFile, Glob, Grep, ReadFile, UndoEdit, WorkspacePath, WriteFile, codes,
    file_tools, resolved_path,
};
pub use wait::Wait;
