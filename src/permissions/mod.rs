//! Permission rules. Built up in steps; `decide` arrives with the rule sets.
// Nothing outside the module uses these until `decide` exists.
#![allow(dead_code)]

mod bash;
mod command;
mod dangerous;
mod file;
mod shell;
mod web;
