//! Tools that ship with toolgate.

mod echo;
mod wait;

pub use echo::Echo;
pub use wait::Wait;
