//! Which assistant message of a thread declares a call: the call's
//! `TOOL_CALL_START` names it as `parentMessageId`, so an AG-UI client adds
//! the call to that message live as the snapshot and the history show it.

use std::collections::HashSet;

use super::{CallRequest, Engine, Rejection};
use crate::protocol::json::same_json;
use crate::store::StoreError;

/// Which message of the thread declares a call, as far as the engine knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Declared {
    /// Not looked up yet (or to be looked up again).
    #[default]
    Unknown,
    /// No message declares the call.
    Nowhere,
    /// This assistant message declares it.
    By(String),
}

impl Declared {
    pub(super) fn message(&self) -> Option<String> {
        match self {
            Declared::By(message) => Some(message.clone()),
            Declared::Unknown | Declared::Nowhere => None,
        }
    }
}

/// `req`'s call belongs to message `declared_by`, which declares it: its
/// parent, unless it was posted with another (`OtherParent`).
pub(super) fn link(req: &mut CallRequest, declared_by: String) -> Result<(), Rejection> {
    match &req.call.parent_message_id {
        Some(given) if *given != declared_by => Err(Rejection::OtherParent {
            id: req.call.id.clone(),
            declared_by,
            given: given.clone(),
        }),
        _ => {
            req.call.parent_message_id = Some(declared_by.clone());
            req.declared = Declared::By(declared_by);
            Ok(())
        }
    }
}

/// Threads this process found to declare no call, and how many times a
/// thread was dropped from them: a look begun before a drop is not kept
/// after it (the drop may be of its thread). Only a shortcut: a call's
/// record commits only if the thread still declares it as looked up, so a
/// thread kept here after a message (of another process, say) declared
/// calls in it is dropped at its first such call's conflict.
#[derive(Default)]
pub(super) struct Undeclaring {
    threads: HashSet<String>,
    drops: u64,
}

impl Engine {
    /// A new call that an assistant message of the thread declares belongs
    /// to that message: its TOOL_CALL_START names the message as its
    /// parent, posted with the message's id or without one, so an AG-UI
    /// client adds the call to that message live, as the snapshot and the
    /// history show it. Posted with another message's id, it is refused
    /// (`OtherParent`). An undeclared call keeps what it was posted with.
    ///
    /// What is found here holds when the call's record commits: the store
    /// refuses the record (a conflict) if the thread declares the call
    /// otherwise by then, and the call looks again ([`Engine::look_again`]).
    /// Declared with another tool than `tool_name` or other arguments, it is
    /// refused (`Redeclared`) before it runs.
    ///
    /// Most threads declare nothing (calls posted straight to
    /// `/tool-calls`): a thread found so is remembered, and its calls look
    /// nothing up until a message declaring calls is recorded in it
    /// ([`Engine::declarations_recorded`]) or a record meets a declaration.
    pub(super) async fn link_to_declaration(
        &self,
        req: &mut CallRequest,
        tool_name: &str,
    ) -> Result<(), Rejection> {
        if req.declared != Declared::Unknown {
            return Ok(());
        }
        let drops = {
            let undeclaring = self.undeclaring.lock().expect("undeclaring lock");
            if undeclaring.threads.contains(&req.thread_id) {
                req.declared = Declared::Nowhere;
                return Ok(());
            }
            undeclaring.drops
        };
        let declaration = self
            .store
            .call_declaration(&req.thread_id, &req.call.id)
            .await?;
        if !declaration.thread_declares {
            let mut undeclaring = self.undeclaring.lock().expect("undeclaring lock");
            if undeclaring.drops == drops {
                if undeclaring.threads.len() >= 100_000 {
                    undeclaring.threads.clear();
                }
                undeclaring.threads.insert(req.thread_id.clone());
            }
        }
        match declaration.by {
            Some(by) if by.tool_name != tool_name => Err(Rejection::DeclaredConflict {
                id: req.call.id.clone(),
                field: "name",
            }),
            Some(by) if !same_json(&by.args, &req.call.arguments) => {
                Err(Rejection::DeclaredConflict {
                    id: req.call.id.clone(),
                    field: "arguments",
                })
            }
            Some(by) => {
                // The name the message calls it by: an alias as written.
                req.declared_name = self
                    .store
                    .message(&req.thread_id, &by.message_id)
                    .await?
                    .and_then(|m| {
                        crate::protocol::context::declared_name(&m, &req.call.id)
                            .map(str::to_string)
                    });
                link(req, by.message_id)
            }
            None => {
                req.declared = Declared::Nowhere;
                Ok(())
            }
        }
    }

    /// A write of `req`'s call met a conflict: the id recorded meanwhile,
    /// or the call declared by a message recorded since it was looked up.
    /// Its declaration is looked up again, in the store.
    pub(super) fn look_again(&self, req: &mut CallRequest) {
        if req.declared == Declared::Nowhere {
            self.declarations_recorded(&req.thread_id);
        }
        req.declared = Declared::Unknown;
    }

    /// `e`, which refused the record of `req`'s call, as its rejection. A
    /// declaration of the call with another tool or arguments, recorded
    /// since the look-up (`Redeclared`), is looked up next time.
    pub(super) fn refused_record(&self, req: &mut CallRequest, e: StoreError) -> Rejection {
        if matches!(e, StoreError::Redeclared(_)) {
            self.look_again(req);
        }
        e.into()
    }

    /// A message declaring calls was recorded in `thread_id`: its calls
    /// look up their declarations again. Called after the message commits.
    pub fn declarations_recorded(&self, thread_id: &str) {
        let mut undeclaring = self.undeclaring.lock().expect("undeclaring lock");
        undeclaring.threads.remove(thread_id);
        undeclaring.drops += 1;
    }
}
