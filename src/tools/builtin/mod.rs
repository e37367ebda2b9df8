//! Tools that ship with toolgate.

mod bash;
mod echo;
mod wait;

pub use bash::Bash;
pub use echo::Echo;
pub use wait::Wait;
