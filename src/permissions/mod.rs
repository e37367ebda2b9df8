//! Permission rules. Built up in steps; `decide` arrives with the rule sets.
// Nothing outside the module uses the lexer until `decide` exists.
#![allow(dead_code)]

mod shell;
