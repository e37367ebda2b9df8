//! toolgate: a tool-execution microservice for agent backends. A chat
//! backend hands it the tool calls a model made; toolgate decides whether
//! each may run, runs it, stores the outcome as a message and streams it to
//! frontends as AG-UI events.

// A `ToolError` is deliberately rich (code, hint, schema, per-field errors) so
// a model can correct itself; it travels by value on cold paths only.
#![allow(clippy::result_large_err)]

pub mod auth;
pub mod config;
pub mod engine;
pub mod events;
pub mod http;
pub mod permissions;
pub mod protocol;
pub mod sandbox;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod workspace;
