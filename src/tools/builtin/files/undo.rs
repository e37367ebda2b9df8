use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::change::{diff, history_error, remove_empty_dirs, with_current};
use super::write::diff_hints;
use super::{
    WorkspacePath, blocking, cancelled, codes, confine, open_history, open_workspace, parse_args,
};
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};
use crate::workspace::Workspaces;

/// `undo_edit`: restore a file to its state before the last change made by
/// `write_file`, `edit_file` or `apply_diff`.
pub struct UndoEdit {
    workspaces: Arc<Workspaces>,
}

impl UndoEdit {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        UndoEdit { workspaces }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    /// The history entry a call's UndoInfo names: undo exactly that change,
    /// and only if it is still the newest.
    #[serde(default)]
    entry: Option<u64>,
    /// Restore even though the file changed since the change being undone.
    #[serde(default)]
    force: bool,
}

#[async_trait]
impl Tool for UndoEdit {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "undo_edit".into(),
            description: "Undo the last change that write_file, edit_file or apply_diff made to \
                a file: restore its previous content, or remove it if that change created it. \
                Repeat to go further back (up to 20 changes per file). Refuses when the file \
                was changed by other means since, unless force is true."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1,
                             "description": "File path relative to the workspace root."},
                    "entry": {"type": "integer", "minimum": 1, "maximum": crate::tools::MAX_EXACT_INTEGER,
                              "description": "Undo this history entry (the `undo_entry` a change's result gives) and only if it is the file's newest."},
                    "force": {"type": "boolean", "default": false,
                              "description": "Restore even if the file was changed since by something else; those changes are lost, so a call with force is judged as destructive (by default it needs approval)."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata {
                concurrency_safe: false,
                read_only: false,
                destructive: false,
                permission_class: PermissionClass::File,
                audit_operation: "write".into(),
                search_hint: Some("revert the last file change".into()),
                ..ToolMetadata::default()
            },
            capability: ToolCapability {
                affected_resources: vec!["file".into()],
                ..ToolCapability::default()
            },
        }
    }

    /// With `force`, what changed since the undone change is discarded,
    /// and kept nowhere.
    fn destructive_call(&self, args: &Value) -> Option<bool> {
        Some(args.get("force") == Some(&Value::Bool(true)))
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let args: Args = parse_args(args)?;
        let workspaces = self.workspaces.clone();
        blocking(move || {
            let ws = open_workspace(&workspaces, &ctx)?;
            let history = open_history(&workspaces, &ctx)?;
            let path = WorkspacePath::parse(&args.path, &ws.path)?;
            with_current(&ws, &path, &ctx, |current| {
                let target = &current.target;
                if let Some(wanted) = args.entry
                    && history.was_undone(target, wanted)
                {
                    return Err(ToolError::new(
                        codes::ALREADY_UNDONE,
                        format!("entry {wanted} of '{}' was undone already", path.display()),
                        false,
                    ));
                }
                let entry = history
                    .latest(target)
                    .map_err(history_error)?
                    .ok_or_else(|| nothing_to_undo(&path, history.dropped_any(target)))?;
                if let Some(wanted) = args.entry
                    && wanted != entry.seq
                {
                    return Err(if history.contains(target, wanted).map_err(history_error)? {
                        ToolError::new(
                            codes::UNDO_CONFLICT,
                            format!(
                                "'{}' was changed again after that change (newest entry {}, this one {wanted}); undo the newer changes first",
                                path.display(),
                                entry.seq
                            ),
                            false,
                        )
                    } else {
                        ToolError::new(
                            codes::NOTHING_TO_UNDO,
                            format!(
                                "entry {wanted} is not in the history of '{}': it was dropped as \
                                 too old, or it is no entry of this file's",
                                path.display()
                            ),
                            false,
                        )
                        .with_hint(format!(
                            "leave entry out to undo the newest change ({}), or give the entry \
                             a change's own undo names",
                            entry.seq
                        ))
                    });
                }
                // A file the change created and something else has removed
                // since is already as undoing would leave it: no conflict.
                let already_undone = !entry.header.existed && current.before.is_none();
                if !args.force && !already_undone && !entry.header.left(current.before.as_deref())
                {
                    return Err(ToolError::new(
                        codes::UNDO_CONFLICT,
                        format!(
                            "'{}' was changed since its last {} by something else (or removed); undoing would lose that",
                            path.display(),
                            entry.header.tool
                        ),
                        false,
                    )
                    .with_hint("Read the file to check, then call undo_edit again with force: true to restore anyway (what changed since is then lost, so by default it waits for approval)."));
                }
                // A change keeps the file's mode (less set-user-ID and
                // set-group-ID), so a mode other than that was set since by
                // something else: a `chmod 600` undone silently would open
                // the file again.
                if let (false, Some(kept), Some(now)) = (args.force, entry.header.mode, current.mode)
                    && entry.header.existed
                    && kept & 0o1777 != now & 0o7777
                {
                    return Err(ToolError::new(
                        codes::UNDO_CONFLICT,
                        format!(
                            "the mode of '{}' was changed since its last {} by something else \
                             (it left {:04o}, it is {:04o} now); undoing would set it back to {:04o}",
                            path.display(),
                            entry.header.tool,
                            kept & 0o1777,
                            now & 0o7777,
                            kept & 0o1777,
                        ),
                        false,
                    )
                    .with_hint("If the content should go back but the mode stay, call undo_edit again with force: true and then set the mode again with bash (chmod); force restores the earlier mode too, so by default it waits for approval."));
                }
                cancelled(&ctx)?;
                let restored: Option<&[u8]> = entry.header.existed.then_some(entry.before.as_slice());
                let created_dirs: Vec<WorkspacePath> = entry
                    .header
                    .created_dirs
                    .iter()
                    .filter_map(|d| WorkspacePath::parse(d, &ws.path).ok())
                    .collect();
                // Where the file is written or removed: where the rules
                // judged its path to lead (directories it needs made there).
                let target_dir = || {
                    confine::open_parent_where_judged(
                        &ws.dir,
                        target,
                        &path,
                        ctx.judged_path.as_ref(),
                        &current.missing_dirs,
                    )
                };
                match restored {
                    Some(bytes) => {
                        target_dir()?
                            .write(bytes, entry.header.mode)
                            .map_err(|e| confine::io_error(e, &path))?;
                    }
                    None => {
                        if current.before.is_some() {
                            let target = target_dir()?;
                            target
                                .dir
                                .remove_file(&target.name)
                                .map_err(|e| confine::io_error(e, &path))?;
                        }
                        remove_empty_dirs(&ws.dir, &created_dirs);
                    }
                }
                history.undone(target, entry.seq).map_err(history_error)?;
                let shown = diff(target, current.before.as_deref(), restored.unwrap_or_default());
                let remaining = history.count(target).map_err(history_error)?;
                let mut result = json!({
                    "path": path.display(),
                    "undone": entry.header.tool,
                    "entry": entry.seq,
                    "action": if restored.is_some() { "restored" } else { "removed" },
                    "bytes": restored.map_or(0, <[u8]>::len),
                    "lines_added": shown.added,
                    "lines_removed": shown.removed,
                    "diff": shown.text,
                    "remaining_undo_steps": remaining,
                });
                if shown.truncated {
                    result["diff_truncated"] = json!(true);
                }
                // The call of this thread that made the change is undone.
                let undoes = entry
                    .header
                    .call
                    .filter(|(thread, call)| *thread == ctx.thread_id && *call != ctx.call_id)
                    .map(|(_, call)| call);
                Ok(ToolSuccess {
                    undoes,
                    ..ToolSuccess::complete(result)
                })
            })
        })
        .await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        diff_hints(result)
    }
}

fn nothing_to_undo(path: &WorkspacePath, dropped: bool) -> ToolError {
    if dropped {
        return ToolError::new(
            codes::NOTHING_TO_UNDO,
            format!(
                "there is no change of '{}' left to undo: the edit history keeps the last {} \
                 changes of a file, and the older ones were dropped",
                path.display(),
                super::history::HISTORY_CAP
            ),
            false,
        )
        .with_hint(
            "Restore the earlier content with a new edit, or with git if the workspace has it.",
        );
    }
    ToolError::new(
        codes::NOTHING_TO_UNDO,
        format!(
            "there is no change of '{}' to undo (only changes made by write_file, edit_file and apply_diff are recorded)",
            path.display()
        ),
        false,
    )
    .with_hint("Check the path. A change made otherwise (by bash, say) cannot be undone this way: restore it with a new edit, or with git if the workspace has it.")
}
