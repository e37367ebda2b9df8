//! toolgate: a tool-execution microservice for agent backends.

pub mod protocol;
pub mod store;
