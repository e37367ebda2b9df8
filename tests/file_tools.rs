//! The workspace file tools, called through the Tool trait as the engine
//! calls them. First from the attacker's side (every way out of the
//! workspace fails with SECURITY_VIOLATION, and nothing outside is read or
//! written), then their behaviour.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use toolgate::config::{LineEndings, WorkspaceSettings};
use toolgate::tools::builtin::{
    ApplyDiff, EditFile, Glob, Grep, ReadFile, UndoEdit, WriteFile, file_tools,
};
use toolgate::tools::{
    DryRunResult, PermissionClass, ProgressSink, Registry, Tool, ToolContext, ToolError,
    ToolSuccess,
};
use toolgate::workspace::Workspaces;

const SECRET: &str = "TOPSECRET-5f1c9a-do-not-leak";

/// A temporary world: `root/` holds the owners' workspaces (alice's is the
/// one under attack, bob's is a sibling), `hist/` the edit histories, and
/// `outside/` plus `root/secret.txt` hold secrets that must stay unread.
struct World {
    tmp: TempDir,
    workspaces: Arc<Workspaces>,
    /// alice's workspace.
    ws: PathBuf,
    bob: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let workspaces =
            Arc::new(Workspaces::new(&tmp.path().join("root"), &tmp.path().join("hist")).unwrap());
        let ws = workspaces.open("alice", None).unwrap().path;
        let bob = workspaces.open("bob", None).unwrap().path;
        std::fs::write(bob.join("secret.txt"), format!("{SECRET} bob\n")).unwrap();
        std::fs::write(
            workspaces.root().join("secret.txt"),
            format!("{SECRET} root\n"),
        )
        .unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{SECRET} outside\n")).unwrap();
        World {
            tmp,
            workspaces,
            ws,
            bob,
        }
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    fn ctx(&self) -> ToolContext {
        ctx_for("alice", None)
    }

    fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.ws.join(rel)).unwrap()
    }

    fn link(&self, target: impl AsRef<Path>, rel: &str) {
        symlink(target, self.ws.join(rel)).unwrap();
    }

    /// Everything in the temporary world except alice's workspace and the
    /// edit histories: what an attack must leave as it was.
    fn outside_snapshot(&self) -> BTreeMap<String, String> {
        let mut skip = vec![self.ws.clone(), self.tmp.path().join("hist")];
        skip.retain(|p| p.exists());
        tree(self.tmp.path(), &skip)
    }

    fn whole_snapshot(&self) -> BTreeMap<String, String> {
        tree(self.tmp.path(), &[])
    }

    fn read_file(&self) -> ReadFile {
        ReadFile::new(self.workspaces.clone())
    }
    fn write_file(&self) -> WriteFile {
        WriteFile::new(self.workspaces.clone(), LineEndings::Lf)
    }
    fn edit_file(&self) -> EditFile {
        EditFile::new(self.workspaces.clone())
    }
    fn apply_diff(&self) -> ApplyDiff {
        ApplyDiff::new(self.workspaces.clone())
    }
    fn undo_edit(&self) -> UndoEdit {
        UndoEdit::new(self.workspaces.clone())
    }
    fn glob(&self) -> Glob {
        Glob::new(self.workspaces.clone())
    }
    fn grep(&self) -> Grep {
        Grep::new(self.workspaces.clone())
    }
}

fn ctx_for(owner: &str, sub: Option<&str>) -> ToolContext {
    ToolContext {
        owner: owner.into(),
        thread_id: "thread-1".into(),
        call_id: "call-1".into(),
        workspace: sub.map(str::to_string),
        cancel: CancellationToken::new(),
        progress: ProgressSink::default(),
        path_rules: None,
        judged_path: None,
        shown: None,
    }
}

/// Path → content hash (or `dir`, or `link -> target`) for a whole tree.
fn tree(root: &Path, skip: &[PathBuf]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if skip.iter().any(|s| s == &path) {
                continue;
            }
            let key = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let value = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                let bytes = std::fs::read(&path).unwrap();
                format!("{} bytes, {:x}", bytes.len(), fnv(&bytes))
            };
            out.insert(key, value);
        }
    }
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

async fn ok(tool: &dyn Tool, world: &World, args: Value) -> ToolSuccess {
    match tool.execute(args.clone(), world.ctx()).await {
        Ok(success) => success,
        Err(e) => panic!("{} {args} failed: {e:?}", tool.definition().name),
    }
}

async fn err(tool: &dyn Tool, world: &World, args: Value) -> ToolError {
    match tool.execute(args.clone(), world.ctx()).await {
        Ok(success) => panic!(
            "{} {args} succeeded: {}",
            tool.definition().name,
            success.result
        ),
        Err(e) => e,
    }
}

async fn dry(tool: &dyn Tool, world: &World, args: Value) -> Result<DryRunResult, ToolError> {
    tool.dry_run(args, world.ctx()).await
}

/// The attack fails with SECURITY_VIOLATION, names no secret, and leaves
/// everything outside alice's workspace as it was. Changing tools are also
/// tried as dry runs.
async fn refused(world: &World, tool: &dyn Tool, args: Value) {
    let before = world.outside_snapshot();
    let error = err(tool, world, args.clone()).await;
    assert_eq!(
        error.code,
        "SECURITY_VIOLATION",
        "{} {args}: {error:?}",
        tool.definition().name
    );
    let shown = serde_json::to_string(&error).unwrap();
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(!shown.contains("root:x:0:0"), "{shown}");
    if tool.definition().capability.dry_run {
        let error = dry(tool, world, args.clone()).await.unwrap_err();
        assert_eq!(error.code, "SECURITY_VIOLATION", "dry run {args}");
    }
    assert_eq!(
        before,
        world.outside_snapshot(),
        "{args} changed the outside"
    );
}

/// Every tool that takes a file path, with the arguments to aim it at `path`.
fn path_attacks(world: &World, path: &str) -> Vec<(Box<dyn Tool>, Value)> {
    vec![
        (Box::new(world.read_file()), json!({"path": path})),
        (
            Box::new(world.write_file()),
            json!({"path": path, "content": "pwned"}),
        ),
        (
            Box::new(world.edit_file()),
            json!({"path": path, "old_string": SECRET, "new_string": "pwned"}),
        ),
        (
            Box::new(world.apply_diff()),
            json!({"path": path, "diff": format!("@@ -1 +1 @@\n-{SECRET} outside\n+pwned\n")}),
        ),
        (Box::new(world.undo_edit()), json!({"path": path})),
        (
            Box::new(world.grep()),
            json!({"pattern": "SECRET", "path": path, "output_mode": "content"}),
        ),
    ]
}

async fn refused_everywhere(world: &World, path: &str) {
    for (tool, args) in path_attacks(world, path) {
        refused(world, tool.as_ref(), args).await;
    }
}

// ---------------------------------------------------------------------------
// Confinement, from the attacker's side
// ---------------------------------------------------------------------------

#[tokio::test]
async fn parent_components_are_refused_by_every_tool() {
    let world = World::new();
    for path in [
        "../x",
        "../secret.txt",
        "a/../../x",
        "a/../../u_bob/secret.txt",
        "..",
    ] {
        refused_everywhere(&world, path).await;
    }
    refused(&world, &world.glob(), json!({"pattern": "*", "path": ".."})).await;
    refused(
        &world,
        &world.glob(),
        json!({"pattern": "*", "path": "a/../.."}),
    )
    .await;
}

#[tokio::test]
async fn absolute_paths_outside_the_workspace_are_refused() {
    let world = World::new();
    refused(&world, &world.read_file(), json!({"path": "/etc/passwd"})).await;
    refused(
        &world,
        &world.grep(),
        json!({"pattern": "root", "path": "/etc"}),
    )
    .await;
    refused(
        &world,
        &world.glob(),
        json!({"pattern": "*", "path": "/etc"}),
    )
    .await;
    // A sibling owner's workspace, by its absolute path.
    let bob_secret = world.bob.join("secret.txt").display().to_string();
    refused_everywhere(&world, &bob_secret).await;
    let bob_new = world.bob.join("new.txt").display().to_string();
    refused(
        &world,
        &world.write_file(),
        json!({"path": bob_new, "content": "x"}),
    )
    .await;
    assert!(!world.bob.join("new.txt").exists());
    // A prefix that is only a string prefix of alice's path.
    let lookalike = format!("{}2/x", world.ws.display());
    refused(&world, &world.read_file(), json!({"path": lookalike})).await;
    let outside = world.outside().join("secret.txt").display().to_string();
    refused_everywhere(&world, &outside).await;
}

#[tokio::test]
async fn absolute_paths_inside_the_workspace_are_accepted() {
    let world = World::new();
    world.write("src/a.txt", "hello\n");
    let path = world.ws.join("src/a.txt").display().to_string();
    let read = ok(&world.read_file(), &world, json!({"path": path})).await;
    assert_eq!(read.result["path"], "src/a.txt");
    assert_eq!(read.result["content"], "     1\thello");
}

#[tokio::test]
async fn proc_self_is_refused_directly_and_through_a_link() {
    let world = World::new();
    refused(
        &world,
        &world.read_file(),
        json!({"path": "/proc/self/environ"}),
    )
    .await;
    world.link("/proc/self/environ", "env");
    refused(&world, &world.read_file(), json!({"path": "env"})).await;
    world.link("/proc/self/root", "slash");
    refused(
        &world,
        &world.read_file(),
        json!({"path": "slash/etc/passwd"}),
    )
    .await;
}

#[tokio::test]
async fn a_link_to_an_outside_directory_leads_nowhere() {
    let world = World::new();
    world.link("/etc", "etc");
    refused(&world, &world.read_file(), json!({"path": "etc/passwd"})).await;
    refused(&world, &world.read_file(), json!({"path": "etc"})).await;
    refused(
        &world,
        &world.glob(),
        json!({"pattern": "*", "path": "etc"}),
    )
    .await;
    // For writes, a link to a directory of ours (never /etc: tests run as root).
    world.link(world.outside(), "out");
    refused_everywhere(&world, "out/secret.txt").await;
    refused(
        &world,
        &world.write_file(),
        json!({"path": "out/new.txt", "content": "x"}),
    )
    .await;
    refused(
        &world,
        &world.write_file(),
        json!({"path": "out/deeper/new.txt", "content": "x"}),
    )
    .await;
    assert!(!world.outside().join("new.txt").exists());
    assert!(!world.outside().join("deeper").exists());
}

#[tokio::test]
async fn a_relative_link_upwards_leads_nowhere() {
    let world = World::new();
    world.link("..", "up");
    refused_everywhere(&world, "up/secret.txt").await;
    refused_everywhere(&world, "up/u_bob/secret.txt").await;
    refused(
        &world,
        &world.write_file(),
        json!({"path": "up/planted.txt", "content": "x"}),
    )
    .await;
    assert!(!world.workspaces.root().join("planted.txt").exists());
    std::fs::create_dir(world.ws.join("d")).unwrap();
    world.link("../../..", "d/far");
    refused_everywhere(&world, "d/far/outside/secret.txt").await;
}

#[tokio::test]
async fn a_file_link_pointing_out_is_neither_read_nor_written_through() {
    let world = World::new();
    let target = world.outside().join("secret.txt");
    world.link(&target, "leak.txt");
    world.link("../secret.txt", "leak2.txt");
    for path in ["leak.txt", "leak2.txt"] {
        refused_everywhere(&world, path).await;
    }
    // The write did not replace the link either.
    assert!(
        std::fs::symlink_metadata(world.ws.join("leak.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        format!("{SECRET} outside\n")
    );
}

#[tokio::test]
async fn glob_and_grep_cannot_be_aimed_outside() {
    let world = World::new();
    world.write("a.txt", "hello\n");
    for pattern in ["../**", "../*", "/etc/*", "**/../../*", "{a,..}/*"] {
        refused(&world, &world.glob(), json!({"pattern": pattern})).await;
        refused(
            &world,
            &world.grep(),
            json!({"pattern": "x", "glob": pattern}),
        )
        .await;
    }
    refused(&world, &world.grep(), json!({"pattern": "x", "path": ".."})).await;
}

#[tokio::test]
async fn a_linked_directory_pointing_out_is_not_walked() {
    let world = World::new();
    world.write("mine.txt", "mine\n");
    world.link(world.outside(), "outdir");
    world.link("..", "up");
    let listed = ok(&world.glob(), &world, json!({"pattern": "**/*"})).await;
    let files: Vec<&str> = listed.result["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(files.contains(&"mine.txt"), "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| !f.starts_with("outdir/") && !f.starts_with("up/")),
        "{files:?}"
    );
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "TOPSECRET", "output_mode": "content"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!([]));
    assert!(!found.result.to_string().contains(SECRET));
    refused(
        &world,
        &world.grep(),
        json!({"pattern": "x", "path": "outdir"}),
    )
    .await;
    refused(
        &world,
        &world.glob(),
        json!({"pattern": "**", "path": "up"}),
    )
    .await;
    // The directory listing shows the link as a link, without following it.
    let listing = ok(&world.read_file(), &world, json!({"path": "."})).await;
    let entry = listing.result["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "outdir")
        .unwrap()
        .clone();
    assert_eq!(entry["type"], "symlink");
}

#[tokio::test]
async fn a_sub_workspace_cannot_reach_its_parent() {
    let world = World::new();
    world.write("main-only.txt", "main\n");
    let sub = ctx_for("alice", Some("proj"));
    let error = world
        .read_file()
        .execute(json!({"path": "../main-only.txt"}), sub.clone())
        .await
        .unwrap_err();
    assert_eq!(error.code, "SECURITY_VIOLATION");
    let main_path = world.ws.join("main-only.txt").display().to_string();
    let error = world
        .read_file()
        .execute(json!({"path": main_path}), sub.clone())
        .await
        .unwrap_err();
    assert_eq!(error.code, "SECURITY_VIOLATION");
    // The sub-workspace works on its own files.
    world
        .write_file()
        .execute(json!({"path": "p.txt", "content": "p"}), sub.clone())
        .await
        .unwrap();
    assert_eq!(world.read("proj/p.txt"), b"p\n");
}

/// A sub-workspace name that is a link an owner made in their workspace (a
/// command can make one): one leading to another owner's workspace, to the
/// root of all of them or anywhere else outside is refused by every tool,
/// and nothing there is read or written. A link to the owner's own
/// directory is that directory.
#[tokio::test]
async fn a_linked_sub_workspace_cannot_lead_out() {
    let world = World::new();
    world.link("../u_bob", "to-bob");
    world.link("..", "to-root");
    world.link(world.outside(), "to-outside");
    std::fs::create_dir(world.ws.join("mine")).unwrap();
    world.write("mine/m.txt", "mine\n");
    world.link("mine", "to-mine");
    let before = (tree(&world.bob, &[]), world.outside_snapshot());
    for sub in ["to-bob", "to-root", "to-outside"] {
        let ctx = ctx_for("alice", Some(sub));
        let attempts: Vec<(Box<dyn Tool>, Value)> = vec![
            (Box::new(world.read_file()), json!({"path": "secret.txt"})),
            (Box::new(world.read_file()), json!({"path": "."})),
            (
                Box::new(world.write_file()),
                json!({"path": "pwned.txt", "content": "x"}),
            ),
            (Box::new(world.glob()), json!({"pattern": "**/*"})),
            (Box::new(world.grep()), json!({"pattern": "SECRET"})),
        ];
        for (tool, args) in attempts {
            let error = tool
                .execute(args.clone(), ctx.clone())
                .await
                .map(|s| panic!("{sub} {args}: ran: {:?}", s.result))
                .unwrap_err();
            assert_eq!(error.code, "INVALID_ARGUMENTS", "{sub} {args}: {error:?}");
            assert!(
                error.message.contains("inside the owner's workspace"),
                "{sub}: {}",
                error.message
            );
            assert!(!error.message.contains(SECRET));
        }
    }
    assert_eq!((tree(&world.bob, &[]), world.outside_snapshot()), before);
    assert!(!world.workspaces.root().join("pwned.txt").exists());
    // A link to a directory of the owner's own is that directory.
    let opened = world.workspaces.open("alice", Some("to-mine")).unwrap();
    assert_eq!(opened.path, world.ws.join("mine"));
    let read = world
        .read_file()
        .execute(json!({"path": "m.txt"}), ctx_for("alice", Some("to-mine")))
        .await
        .unwrap();
    assert!(
        read.result.to_string().contains("mine"),
        "{:?}",
        read.result
    );
}

#[tokio::test]
async fn history_lives_outside_the_workspace() {
    let world = World::new();
    ok(
        &world.write_file(),
        &world,
        json!({"path": "a.txt", "content": "one"}),
    )
    .await;
    ok(
        &world.write_file(),
        &world,
        json!({"path": "a.txt", "content": "two"}),
    )
    .await;
    // Only the file itself is in the workspace; the history is elsewhere.
    let inside = tree(&world.ws, &[]);
    assert_eq!(inside.keys().collect::<Vec<_>>(), vec!["a.txt"]);
    assert!(!tree(&world.tmp.path().join("hist"), &[]).is_empty());
}

// ---------------------------------------------------------------------------
// read_file
// ---------------------------------------------------------------------------

#[tokio::test]
async fn read_numbers_lines_like_cat_n() {
    let world = World::new();
    world.write("src/lib.rs", "fn a() {}\n\nfn b() {}\n");
    let read = ok(&world.read_file(), &world, json!({"path": "src/lib.rs"})).await;
    assert_eq!(
        read.result["content"],
        "     1\tfn a() {}\n     2\t\n     3\tfn b() {}"
    );
    assert_eq!(read.result["language"], "rust");
    assert_eq!(read.result["total_lines"], 3);
    assert_eq!(read.result["start_line"], 1);
    assert_eq!(read.result["end_line"], 3);
    assert!(!read.partial);
    assert!(read.result.get("next_offset").is_none());
    let hints = world
        .read_file()
        .ui_hints(&json!({"path": "src/lib.rs"}), &read.result)
        .unwrap();
    assert_eq!(hints["view"], "core.code_block");
    // The file is stored once, in the result: the hints point at it.
    assert_eq!(
        hints["code"],
        json!({"result": "/content", "numbered": true})
    );
    let ui = toolgate::protocol::ui_schema::compile_for(&hints, &read.result).unwrap();
    assert_eq!(ui["data"]["code"], "fn a() {}\n\nfn b() {}", "{ui}");
    assert_eq!(hints["language"], "rust");
    assert_eq!(
        (hints["start_line"].clone(), hints["end_line"].clone()),
        (json!(1), json!(3))
    );
}

#[tokio::test]
async fn read_offset_and_limit_select_a_range_and_say_how_to_go_on() {
    let world = World::new();
    let text: String = (1..=10).map(|i| format!("line {i}\r\n")).collect();
    world.write("notes.txt", text);
    let read = ok(
        &world.read_file(),
        &world,
        json!({"path": "notes.txt", "offset": 3, "limit": 2}),
    )
    .await;
    assert_eq!(read.result["content"], "     3\tline 3\n     4\tline 4");
    assert_eq!(read.result["next_offset"], 5);
    assert!(read.partial);
    assert!(read.result["note"].as_str().unwrap().contains("offset 5"));
    let tail = ok(
        &world.read_file(),
        &world,
        json!({"path": "notes.txt", "offset": 10}),
    )
    .await;
    assert_eq!(tail.result["content"], "    10\tline 10");
    assert!(!tail.partial);
}

#[tokio::test]
async fn read_caps_lines_and_cuts_long_ones() {
    let world = World::new();
    let text: String = (1..=2_500).map(|i| format!("{i}\n")).collect();
    world.write("big.txt", text);
    let read = ok(&world.read_file(), &world, json!({"path": "big.txt"})).await;
    assert_eq!(read.result["end_line"], 2_000);
    assert_eq!(read.result["total_lines"], 2_500);
    assert_eq!(read.result["next_offset"], 2_001);
    assert!(read.partial);
    let long = format!("short\n{}\n", "x".repeat(2_500));
    world.write("long.txt", long);
    let read = ok(&world.read_file(), &world, json!({"path": "long.txt"})).await;
    assert!(read.partial);
    assert_eq!(read.result["lines_cut"], 1);
    let content = read.result["content"].as_str().unwrap();
    let second = content.lines().nth(1).unwrap();
    assert!(second.contains(&"x".repeat(2_000)));
    assert!(!second.contains(&"x".repeat(2_001)));
    assert!(
        second.ends_with("… [line cut: 500 more characters]"),
        "{second}"
    );
}

/// A call shows at most 256,000 characters of lines in all: 2,000 lines
/// of 600 characters stop before the line that would pass it, and the
/// next offset goes on from there, so that no one result (streamed as one
/// event with its ui_schema) grows past what an AG-UI client reads in one.
#[tokio::test]
async fn read_stops_at_its_character_budget_and_says_where_to_go_on() {
    let world = World::new();
    let line = "y".repeat(600);
    let text: String = (0..2_000).map(|_| format!("{line}\n")).collect();
    world.write("wide.txt", text);
    let read = ok(&world.read_file(), &world, json!({"path": "wide.txt"})).await;
    // 426 lines of 600 make 255,600 characters; a 427th would pass 256,000.
    assert_eq!(read.result["end_line"], 426, "{}", read.result["note"]);
    assert_eq!(read.result["next_offset"], 427);
    assert!(read.partial);
    let note = read.result["note"].as_str().unwrap();
    assert!(note.contains("256000 characters per call"), "{note}");
    let next = ok(
        &world.read_file(),
        &world,
        json!({"path": "wide.txt", "offset": 427}),
    )
    .await;
    assert_eq!(next.result["start_line"], 427);
    assert_eq!(next.result["end_line"], 852);
}

/// A link whose target steps up (`..`) after another link steps up from
/// where that link leads, as the kernel resolves it: `lx/L` → `p/../new.txt`
/// with `lx/p` → `docs/sub` is `lx/docs/new.txt`, not `lx/new.txt`.
#[tokio::test]
async fn a_links_parent_step_is_taken_where_the_kernel_takes_it() {
    let world = World::new();
    std::fs::create_dir_all(world.ws.join("lx/docs/sub")).unwrap();
    world.link("docs/sub", "lx/p");
    world.link("p/../new.txt", "lx/L");
    let written = ok(
        &world.write_file(),
        &world,
        json!({"path": "lx/L", "content": "hi"}),
    )
    .await;
    assert_eq!(
        written.result["resolved_path"], "lx/docs/new.txt",
        "{}",
        written.result
    );
    assert!(world.ws.join("lx/docs/new.txt").is_file());
    assert!(!world.ws.join("lx/new.txt").exists());
    let read = ok(&world.read_file(), &world, json!({"path": "lx/L"})).await;
    assert_eq!(read.result["content"], "     1\thi");
    ok(
        &world.edit_file(),
        &world,
        json!({"path": "lx/L", "old_string": "hi", "new_string": "ho"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(world.ws.join("lx/docs/new.txt")).unwrap(),
        "ho\n"
    );
}

/// A path ending in `/` names a directory, as the kernel reads it:
/// `a.txt/` is neither read nor written as the file `a.txt`.
#[tokio::test]
async fn a_trailing_slash_names_a_directory() {
    let world = World::new();
    world.write("a.txt", "one\n");
    for path in ["a.txt/", "a.txt/."] {
        let e = err(&world.read_file(), &world, json!({"path": path})).await;
        assert_eq!(e.code, "NOT_A_DIRECTORY", "{path}: {e:?}");
        let e = err(
            &world.write_file(),
            &world,
            json!({"path": path, "content": "two"}),
        )
        .await;
        assert_eq!(e.code, "INVALID_ARGUMENTS", "{path}: {e:?}");
        let e = err(
            &world.edit_file(),
            &world,
            json!({"path": path, "old_string": "one", "new_string": "two"}),
        )
        .await;
        assert_eq!(e.code, "INVALID_ARGUMENTS", "{path}: {e:?}");
    }
    let e = err(
        &world.write_file(),
        &world,
        json!({"path": "new/", "content": "x"}),
    )
    .await;
    assert_eq!(e.code, "INVALID_ARGUMENTS", "{e:?}");
    assert!(!world.ws.join("new").exists());
    assert_eq!(world.read("a.txt"), b"one\n");
    // A directory named with its slash is listed as before.
    std::fs::create_dir(world.ws.join("d")).unwrap();
    let listed = ok(&world.read_file(), &world, json!({"path": "d/"})).await;
    assert_eq!(listed.result["type"], "directory");
}

/// A grep returns at most 256,000 characters of entries, whatever its
/// head_limit and context: 5,000 matched lines of 450 characters stop well
/// before the head_limit, saying why.
#[tokio::test]
async fn grep_stops_at_its_character_budget() {
    let world = World::new();
    let line = format!("match {}", "z".repeat(444));
    let text: String = (0..5_000).map(|_| format!("{line}\n")).collect();
    world.write("many.txt", text);
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "match", "output_mode": "content", "head_limit": 5000}),
    )
    .await;
    let entries = found.result["entries"].as_array().unwrap();
    let chars: usize = entries
        .iter()
        .map(|e| e.as_str().unwrap().chars().count())
        .sum();
    assert!(chars <= 256_000, "{chars}");
    assert!(
        entries.len() > 400 && entries.len() < 5_000,
        "{}",
        entries.len()
    );
    assert_eq!(found.result["truncated"], true);
    assert!(found.partial);
    let note = found.result["note"].as_str().unwrap();
    assert!(note.contains("256000 characters"), "{note}");
}

/// A file of one huge line (64 MiB here; a command can make one of
/// `sandbox.file_size_bytes`) is read and grepped without the line being
/// held: `read_file` keeps the start of it, cuts it and reads past the rest
/// (not even checking that it is text), `grep` searches it up to its heap
/// limit and says the file was not searched to its end. Both results stay
/// small.
#[tokio::test]
async fn a_huge_line_is_cut_and_read_past_not_held() {
    use std::io::Write;
    const HUGE: usize = 64 * 1024 * 1024;
    let world = World::new();
    {
        let file = std::fs::File::create(world.ws.join("huge.txt")).unwrap();
        let mut out = std::io::BufWriter::new(file);
        out.write_all(b"needle ").unwrap();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut written = 7;
        while written + chunk.len() <= HUGE {
            out.write_all(&chunk).unwrap();
            written += chunk.len();
        }
        out.write_all(&chunk[..HUGE - written]).unwrap();
        // Past the part of the line that is held: not text, and never looked at.
        out.write_all(b"\xff\xfe needle\nafter the huge line\n")
            .unwrap();
    }
    world.write("small.txt", "a needle here\n");

    let read = ok(&world.read_file(), &world, json!({"path": "huge.txt"})).await;
    let size = read.result.to_string().len();
    assert!(size < 16 * 1024, "{size} bytes");
    assert!(read.partial);
    assert_eq!(read.result["total_lines"], 2, "{}", read.result);
    assert_eq!(read.result["lines_cut"], 1);
    let content = read.result["content"].as_str().unwrap();
    let mut lines = content.lines();
    let first = lines.next().unwrap();
    assert!(first.contains("needle xxx"), "{}", &first[..100]);
    // The characters left out, the two that are not UTF-8 included.
    let more = HUGE + 2 + " needle".len() - 2_000;
    assert!(
        first.ends_with(&format!("… [line cut: {more} more characters]")),
        "{}",
        &first[first.len() - 80..]
    );
    assert!(lines.next().unwrap().ends_with("\tafter the huge line"));
    let read = ok(
        &world.read_file(),
        &world,
        json!({"path": "huge.txt", "offset": 2}),
    )
    .await;
    assert_eq!(read.result["content"], "     2\tafter the huge line");

    for mode in ["content", "files_with_matches", "count"] {
        let found = ok(
            &world.grep(),
            &world,
            json!({"pattern": "needle", "output_mode": mode}),
        )
        .await;
        let r = &found.result;
        let size = r.to_string().len();
        assert!(size < 16 * 1024, "{mode}: {size} bytes");
        assert!(found.partial, "{r}");
        assert!(r["entries"].to_string().contains("small.txt"), "{r}");
        assert_eq!(r["not_searched"][0]["path"], "huge.txt", "{r}");
        let reason = r["not_searched"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("a line longer than"), "{reason}");
        assert!(
            r["not_searched_note"]
                .as_str()
                .unwrap()
                .starts_with("1 file could not")
        );
    }
    // One file, named.
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "after", "path": "huge.txt", "output_mode": "content"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!([]), "{}", found.result);
    assert_eq!(found.result["not_searched"][0]["path"], "huge.txt");
    // Ordinary files report nothing of the kind.
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "needle", "path": "small.txt"}),
    )
    .await;
    assert!(!found.partial);
    assert!(
        found.result.get("not_searched").is_none(),
        "{}",
        found.result
    );
}

/// A binary file is skipped quietly in a walk, as the description says,
/// but one the call names says so: "no match" would be taken for an
/// answer.
#[tokio::test]
async fn grep_says_a_named_file_is_binary() {
    let world = World::new();
    world.write("blob.bin", b"\x7fELF\x02\x01\x00\x00needle\n".as_slice());
    world.write("text.txt", "needle\n");
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "needle", "path": "blob.bin", "output_mode": "count"}),
    )
    .await;
    let r = &found.result;
    assert!(found.partial, "{r}");
    assert_eq!(r["not_searched"][0]["path"], "blob.bin", "{r}");
    let reason = r["not_searched"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("it is binary (a NUL byte at offset"),
        "{reason}"
    );
    assert!(
        reason.ends_with("; it was not searched as text"),
        "{reason}"
    );
    assert!(
        r["not_searched_note"].as_str().unwrap().contains("grep -a"),
        "{r}"
    );
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "needle", "output_mode": "files_with_matches"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!(["text.txt"]));
    assert!(
        found.result.get("not_searched").is_none(),
        "{}",
        found.result
    );
    assert!(!found.partial);
}

#[tokio::test]
async fn read_lists_a_directory_sorted_with_types_and_sizes() {
    let world = World::new();
    world.write("b.txt", "12345");
    world.write("a/inner.txt", "x");
    world.link("b.txt", "c-link");
    let read = ok(&world.read_file(), &world, json!({"path": "."})).await;
    assert_eq!(read.result["type"], "directory");
    let entries = read.result["entries"].as_array().unwrap();
    let summary: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a".into(), "dir".into()),
            ("b.txt".into(), "file".into()),
            ("c-link".into(), "symlink".into())
        ]
    );
    assert_eq!(entries[1]["size"], 5);
    let hints = world
        .read_file()
        .ui_hints(&json!({"path": "."}), &read.result)
        .unwrap();
    assert_eq!(hints["view"], "core.list");
    assert_eq!(hints["items"][0]["label"], "a/");
}

#[tokio::test]
async fn read_refuses_binary_files() {
    let world = World::new();
    world.write("nul.bin", b"abc\0def");
    world.write("latin1.txt", b"caf\xe9\n");
    for path in ["nul.bin", "latin1.txt"] {
        let error = err(&world.read_file(), &world, json!({"path": path})).await;
        assert_eq!(error.code, "BINARY_FILE", "{path}");
    }
}

#[tokio::test]
async fn read_reports_empty_files_missing_files_and_offsets_past_the_end() {
    let world = World::new();
    world.write("empty.txt", "");
    let read = ok(&world.read_file(), &world, json!({"path": "empty.txt"})).await;
    assert_eq!(read.result["empty"], true);
    assert_eq!(read.result["total_lines"], 0);
    world.write("three.txt", "a\nb\nc\n");
    let error = err(
        &world.read_file(),
        &world,
        json!({"path": "three.txt", "offset": 4}),
    )
    .await;
    assert_eq!(error.code, "OFFSET_OUT_OF_RANGE");
    assert!(error.message.contains("3 lines"), "{}", error.message);
    let error = err(&world.read_file(), &world, json!({"path": "thre.txt"})).await;
    assert_eq!(error.code, "FILE_NOT_FOUND");
    assert!(error.hint.unwrap().contains("three.txt"));
    let error = err(&world.read_file(), &world, json!({"path": "nowhere/x.txt"})).await;
    assert_eq!(error.code, "FILE_NOT_FOUND");
    assert!(error.hint.unwrap().contains("glob"));
    let error = err(&world.read_file(), &world, json!({"path": "three.txt/x"})).await;
    assert_eq!(error.code, "NOT_A_DIRECTORY");
}

#[tokio::test]
async fn read_refuses_fifos_without_blocking() {
    let world = World::new();
    let fifo = world.ws.join("pipe");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let error = tokio::time::timeout(
        Duration::from_secs(5),
        world
            .read_file()
            .execute(json!({"path": "pipe"}), world.ctx()),
    )
    .await
    .expect("reading a FIFO must not block")
    .unwrap_err();
    assert_eq!(error.code, "NOT_A_REGULAR_FILE");
    let found = tokio::time::timeout(
        Duration::from_secs(5),
        world.grep().execute(json!({"pattern": "x"}), world.ctx()),
    )
    .await
    .expect("grep must not open a FIFO");
    assert!(found.is_ok());
}

/// A FIFO named `.gitignore` (or a link to one named `.ignore`) is no
/// ignore file: `glob` and `grep` finish at once and apply nothing from it.
#[tokio::test]
async fn fifo_ignore_files_do_not_hold_walks() {
    let world = World::new();
    world.write("a/x.txt", "x marks\n");
    for fifo in [".gitignore", "a/pipe"] {
        let c = std::ffi::CString::new(world.ws.join(fifo).as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
    world.link("pipe", "a/.ignore");
    for (tool, args) in [
        (
            Box::new(world.glob()) as Box<dyn Tool>,
            json!({"pattern": "**/*.txt"}),
        ),
        (Box::new(world.grep()), json!({"pattern": "marks"})),
        (
            Box::new(world.grep()),
            json!({"pattern": "marks", "path": "a"}),
        ),
    ] {
        let done = tokio::time::timeout(Duration::from_secs(5), tool.execute(args, world.ctx()))
            .await
            .expect("a FIFO ignore file must not block the walk")
            .unwrap();
        assert!(
            done.result.to_string().contains("a/x.txt"),
            "{}",
            done.result
        );
    }
}

// ---------------------------------------------------------------------------
// write_file
// ---------------------------------------------------------------------------

#[tokio::test]
async fn write_creates_with_parents_and_a_final_newline() {
    let world = World::new();
    let written = ok(
        &world.write_file(),
        &world,
        json!({"path": "deep/er/new.txt", "content": "one\r\ntwo"}),
    )
    .await;
    assert_eq!(world.read("deep/er/new.txt"), b"one\ntwo\n");
    assert_eq!(written.result["created"], true);
    assert_eq!(written.result["overwritten"], false);
    assert_eq!(written.result["bytes_written"], 8);
    assert_eq!(written.result["lines"], 2);
    // The model is not sent its own content back as a diff; the UI shows
    // it, made from the arguments (line endings as written).
    assert_eq!(written.result.get("diff"), None, "{}", written.result);
    assert_eq!(written.result["lines_added"], 2);
    let hints = world
        .write_file()
        .ui_hints(
            &json!({"path": "deep/er/new.txt", "content": "one\r\ntwo"}),
            &written.result,
        )
        .unwrap();
    let shown = hints.to_string();
    assert!(
        shown.contains(r"--- /dev/null\n+++ b/deep/er/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"),
        "{shown}"
    );
    assert!(shown.contains("1 file created, +2 -0"), "{shown}");
    let undo = written.undo.expect("write_file is reversible");
    assert_eq!(undo.tool_name, "undo_edit");
    assert_eq!(undo.input["path"], "deep/er/new.txt");
    assert!(!undo.irreversible);
    assert_eq!(hints["view"], "core.diff");
    assert_eq!(hints["path"], "deep/er/new.txt");
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(world.ws.join("deep/er"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["new.txt"]);
}

#[tokio::test]
async fn write_overwrites_and_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    world.write("run.sh", "old\n");
    std::fs::set_permissions(
        world.ws.join("run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let written = ok(
        &world.write_file(),
        &world,
        json!({"path": "run.sh", "content": "new\n"}),
    )
    .await;
    assert_eq!(written.result["created"], false);
    assert_eq!(written.result["overwritten"], true);
    assert_eq!(world.read("run.sh"), b"new\n");
    let mode = std::fs::metadata(world.ws.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    // The same content again: nothing to write, nothing to undo.
    let again = ok(
        &world.write_file(),
        &world,
        json!({"path": "run.sh", "content": "new"}),
    )
    .await;
    assert_eq!(again.result["unchanged"], true);
    assert!(again.undo.is_none());
}

#[tokio::test]
async fn a_cancelled_call_changes_nothing() {
    let world = World::new();
    world.write("f.txt", "a\n");
    let before = world.whole_snapshot();
    let ctx = world.ctx();
    ctx.cancel.cancel();
    let error = world
        .write_file()
        .execute(json!({"path": "f.txt", "content": "b"}), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(error.code, "CANCELLED");
    let error = world
        .edit_file()
        .execute(
            json!({"path": "f.txt", "old_string": "a", "new_string": "b"}),
            ctx,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code, "CANCELLED");
    assert_eq!(before, world.whole_snapshot());
}

#[tokio::test]
async fn write_uses_crlf_when_configured() {
    let world = World::new();
    let tool = WriteFile::new(world.workspaces.clone(), LineEndings::Crlf);
    ok(
        &tool,
        &world,
        json!({"path": "w.txt", "content": "a\nb\r\nc"}),
    )
    .await;
    assert_eq!(world.read("w.txt"), b"a\r\nb\r\nc\r\n");
}

#[tokio::test]
async fn write_refuses_directories_and_files_as_parents() {
    let world = World::new();
    world.write("dir/x.txt", "x");
    let error = err(
        &world.write_file(),
        &world,
        json!({"path": "dir", "content": "x"}),
    )
    .await;
    assert_eq!(error.code, "DIRECTORY_NOT_FILE");
    let error = err(
        &world.write_file(),
        &world,
        json!({"path": "dir/x.txt/y.txt", "content": "x"}),
    )
    .await;
    assert_eq!(error.code, "NOT_A_DIRECTORY");
}

#[tokio::test]
async fn write_through_a_link_inside_writes_its_target() {
    let world = World::new();
    world.write("real/target.txt", "old\n");
    world.link("real/target.txt", "alias.txt");
    let written = ok(
        &world.write_file(),
        &world,
        json!({"path": "alias.txt", "content": "new"}),
    )
    .await;
    assert_eq!(written.result["resolved_path"], "real/target.txt");
    assert_eq!(world.read("real/target.txt"), b"new\n");
    assert!(
        std::fs::symlink_metadata(world.ws.join("alias.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

// ---------------------------------------------------------------------------
// edit_file
// ---------------------------------------------------------------------------

#[tokio::test]
async fn edit_replaces_once_and_shows_the_change() {
    let world = World::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    world.write("f.txt", &text);
    let edited = ok(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "line 5\n", "new_string": "five\nand a half\n"}),
    )
    .await;
    assert_eq!(
        String::from_utf8(world.read("f.txt")).unwrap(),
        text.replace("line 5\n", "five\nand a half\n")
    );
    assert_eq!(edited.result["replacements"], 1);
    assert_eq!(edited.result["first_changed_line"], 5);
    let snippet = edited.result["snippet"].as_str().unwrap();
    assert!(snippet.starts_with("     2\tline 2\n"), "{snippet}");
    assert!(
        snippet.contains("     5\tfive\n     6\tand a half"),
        "{snippet}"
    );
    let diff = edited.result["diff"].as_str().unwrap();
    assert!(diff.contains("-line 5\n+five\n+and a half\n"), "{diff}");
    assert!(edited.undo.is_some());
}

#[tokio::test]
async fn edit_not_found_points_at_the_closest_lines() {
    let world = World::new();
    world.write(
        "main.py",
        "import os\n\ndef handler(event, context):\n    return process(event)\n",
    );
    let error = err(
        &world.edit_file(),
        &world,
        json!({"path": "main.py", "old_string": "def handler(evt, context):", "new_string": "x"}),
    )
    .await;
    assert_eq!(error.code, "STRING_NOT_FOUND");
    let hint = error.hint.unwrap();
    assert!(hint.contains("line 3"), "{hint}");
    assert!(
        hint.contains("---\ndef handler(event, context):\n---"),
        "{hint}"
    );
    assert_eq!(
        world.read("main.py"),
        b"import os\n\ndef handler(event, context):\n    return process(event)\n"
    );
}

#[tokio::test]
async fn edit_ambiguous_needs_context_or_replace_all() {
    let world = World::new();
    world.write("f.txt", "x = 1\ny = 2\nx = 1\nx = 1\n");
    let error = err(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 9"}),
    )
    .await;
    assert_eq!(error.code, "AMBIGUOUS_MATCH");
    assert!(error.message.contains("3 times"), "{}", error.message);
    assert!(error.hint.unwrap().contains("replace_all"));
    let edited = ok(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 9", "replace_all": true}),
    )
    .await;
    assert_eq!(edited.result["replacements"], 3);
    assert_eq!(world.read("f.txt"), b"x = 9\ny = 2\nx = 9\nx = 9\n");
}

/// An edit that would make a file larger than the file tools write (a
/// short string replaced everywhere by a long one) is refused before the
/// new text is built, as a dry run too; so is a diff that would. Nothing
/// changes.
#[tokio::test]
async fn an_edit_cannot_grow_a_file_past_the_write_limit() {
    let world = World::new();
    // 200 KiB of `a`, each replaced by 60 bytes: 12,288,000 bytes.
    world.write("a.txt", "a".repeat(200 * 1024));
    let args = json!({"path": "a.txt", "old_string": "a", "new_string": "b".repeat(60), "replace_all": true});
    let error = err(&world.edit_file(), &world, args.clone()).await;
    assert_eq!(error.code, "FILE_TOO_LARGE", "{error:?}");
    assert_eq!(
        error.message,
        "the change would make 'a.txt' 12288000 bytes; the file tools write files of at most 10485760 bytes, and nothing was changed"
    );
    let error = dry(&world.edit_file(), &world, args).await.unwrap_err();
    assert_eq!(error.code, "FILE_TOO_LARGE", "{error:?}");
    // Up to the limit it is an edit like any other.
    let edited = ok(
        &world.edit_file(),
        &world,
        json!({"path": "a.txt", "old_string": "a", "new_string": "b".repeat(51), "replace_all": true}),
    )
    .await;
    assert_eq!(edited.result["replacements"], 200 * 1024);
    assert_eq!(world.read("a.txt").len(), 51 * 200 * 1024);
    // A diff adding to a file near the limit.
    world.write("big.txt", "x\n".repeat(5 * 1024 * 1024));
    let added = format!("+{}\n", "y".repeat(600 * 1024));
    let diff = format!("--- a/big.txt\n+++ b/big.txt\n@@ -1,1 +1,2 @@\n x\n{added}");
    let error = err(
        &world.apply_diff(),
        &world,
        json!({"path": "big.txt", "diff": diff}),
    )
    .await;
    assert_eq!(error.code, "FILE_TOO_LARGE", "{error:?}");
    assert_eq!(world.read("big.txt").len(), 10 * 1024 * 1024);
}

#[tokio::test]
async fn edit_refusals_name_the_problem() {
    let world = World::new();
    world.write("f.txt", "abc\n");
    world.write("bad.txt", b"caf\xe9 abc\n");
    world.write("d/x", "x");
    let cases = [
        (
            json!({"path": "f.txt", "old_string": "", "new_string": "x"}),
            "INVALID_ARGUMENTS",
        ),
        (
            json!({"path": "f.txt", "old_string": "abc", "new_string": "abc"}),
            "NO_CHANGE",
        ),
        (
            json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
            "FILE_NOT_FOUND",
        ),
        (
            json!({"path": "d", "old_string": "a", "new_string": "b"}),
            "DIRECTORY_NOT_FILE",
        ),
        (
            json!({"path": "bad.txt", "old_string": "abc", "new_string": "x"}),
            "BINARY_FILE",
        ),
    ];
    for (args, code) in cases {
        let error = err(&world.edit_file(), &world, args.clone()).await;
        assert_eq!(error.code, code, "{args}");
    }
    let error = err(
        &world.edit_file(),
        &world,
        json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert!(error.hint.unwrap().contains("write_file"));
    assert_eq!(world.read("f.txt"), b"abc\n");
}

// ---------------------------------------------------------------------------
// apply_diff
// ---------------------------------------------------------------------------

#[tokio::test]
async fn apply_diff_applies_every_hunk() {
    let world = World::new();
    world.write("f.txt", "a\nb\nc\nd\ne\nf\ng\nh\n");
    let diff = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -6,3 +6,4 @@\n f\n g\n+g2\n h\n";
    let applied = ok(
        &world.apply_diff(),
        &world,
        json!({"path": "f.txt", "diff": diff}),
    )
    .await;
    assert_eq!(world.read("f.txt"), b"a\nB\nc\nd\ne\nf\ng\ng2\nh\n");
    assert_eq!(applied.result["hunks_applied"], 2);
    assert_eq!(applied.result["lines_added"], 2);
    assert_eq!(applied.result["lines_removed"], 1);
    assert_eq!(applied.undo.unwrap().input["path"], "f.txt");
}

#[tokio::test]
async fn apply_diff_that_does_not_fit_changes_nothing() {
    let world = World::new();
    let original = b"a\nb\nc\nd\ne\nf\n";
    world.write("f.txt", original);
    let before = world.whole_snapshot();
    // The first hunk fits; the second expects a line that is not there.
    let diff = "@@ -1,2 +1,2 @@\n a\n-b\n+B\n@@ -4,2 +4,2 @@\n d\n-X\n+Y\n";
    let error = err(
        &world.apply_diff(),
        &world,
        json!({"path": "f.txt", "diff": diff}),
    )
    .await;
    assert_eq!(error.code, "DIFF_DOES_NOT_APPLY");
    assert!(error.message.contains("hunk 2 of 2"), "{}", error.message);
    assert!(error.message.contains("line 4"), "{}", error.message);
    assert!(error.hint.unwrap().contains("     5\te"));
    assert_eq!(world.read("f.txt"), original);
    assert_eq!(
        before,
        world.whole_snapshot(),
        "nothing may change, history included"
    );
    let error = err(
        &world.apply_diff(),
        &world,
        json!({"path": "f.txt", "diff": "not a diff"}),
    )
    .await;
    assert_eq!(error.code, "INVALID_DIFF");
}

#[tokio::test]
async fn apply_diff_from_dev_null_creates_the_file() {
    let world = World::new();
    let diff = "--- /dev/null\n+++ b/new/file.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n";
    let applied = ok(
        &world.apply_diff(),
        &world,
        json!({"path": "new/file.txt", "diff": diff}),
    )
    .await;
    assert_eq!(applied.result["created"], true);
    assert_eq!(world.read("new/file.txt"), b"hello\nworld\n");
}

// ---------------------------------------------------------------------------
// undo_edit and the history
// ---------------------------------------------------------------------------

#[tokio::test]
async fn undo_restores_overwrites_and_removes_created_files() {
    let world = World::new();
    let empty = tree(&world.ws, &[]);
    ok(
        &world.write_file(),
        &world,
        json!({"path": "a/b/new.txt", "content": "first"}),
    )
    .await;
    ok(
        &world.write_file(),
        &world,
        json!({"path": "a/b/new.txt", "content": "second"}),
    )
    .await;
    let undone = ok(&world.undo_edit(), &world, json!({"path": "a/b/new.txt"})).await;
    assert_eq!(undone.result["action"], "restored");
    assert_eq!(world.read("a/b/new.txt"), b"first\n");
    let undone = ok(&world.undo_edit(), &world, json!({"path": "a/b/new.txt"})).await;
    assert_eq!(undone.result["action"], "removed");
    assert!(!world.ws.join("a").exists(), "created directories go too");
    assert_eq!(empty, tree(&world.ws, &[]));
    // What the history keeps: a mark per undone change, no content.
    let history = tree(&world.tmp.path().join("hist"), &[]);
    assert!(
        history
            .iter()
            .all(|(k, v)| v == "dir" || k.ends_with(".undone")),
        "{history:?}"
    );
    assert_eq!(
        history.keys().filter(|k| k.ends_with(".undone")).count(),
        2,
        "{history:?}"
    );
    let error = err(&world.undo_edit(), &world, json!({"path": "a/b/new.txt"})).await;
    assert_eq!(error.code, "NOTHING_TO_UNDO");
}

#[tokio::test]
async fn undo_reverts_edits_and_diffs() {
    let world = World::new();
    world.write("f.txt", "one\ntwo\n");
    ok(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "one", "new_string": "uno"}),
    )
    .await;
    ok(
        &world.apply_diff(),
        &world,
        json!({"path": "f.txt", "diff": "@@ -1,2 +1,2 @@\n uno\n-two\n+dos\n"}),
    )
    .await;
    assert_eq!(world.read("f.txt"), b"uno\ndos\n");
    let undone = ok(&world.undo_edit(), &world, json!({"path": "f.txt"})).await;
    assert_eq!(undone.result["undone"], "apply_diff");
    assert_eq!(world.read("f.txt"), b"uno\ntwo\n");
    let undone = ok(&world.undo_edit(), &world, json!({"path": "f.txt"})).await;
    assert_eq!(undone.result["undone"], "edit_file");
    assert_eq!(undone.result["remaining_undo_steps"], 0);
    assert_eq!(world.read("f.txt"), b"one\ntwo\n");
}

#[tokio::test]
async fn the_undo_record_of_a_call_undoes_that_call_only() {
    let world = World::new();
    let first = ok(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "1"}),
    )
    .await;
    ok(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "2"}),
    )
    .await;
    // Undoing the first call while the second still stands is a conflict.
    let error = err(&world.undo_edit(), &world, first.undo.unwrap().input).await;
    assert_eq!(error.code, "UNDO_CONFLICT");
    assert_eq!(world.read("f.txt"), b"2\n");
}

/// A mode set since the change (a `chmod 600` on a file of secrets) is a
/// change like any other: undo does not set it back unless forced.
#[tokio::test]
async fn undo_refuses_to_set_back_a_mode_changed_since() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    world.write("run.sh", "echo hi\n");
    let path = world.ws.join("run.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    ok(
        &world.edit_file(),
        &world,
        json!({"path": "run.sh", "old_string": "echo hi", "new_string": "echo hey"}),
    )
    .await;
    let mode = || std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(), 0o755, "the edit kept the mode");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    let error = err(&world.undo_edit(), &world, json!({"path": "run.sh"})).await;
    assert_eq!(error.code, "UNDO_CONFLICT");
    assert!(
        error.message.contains("it left 0755, it is 0700 now"),
        "{}",
        error.message
    );
    assert!(error.hint.unwrap().contains("chmod"));
    assert_eq!(
        (world.read("run.sh"), mode()),
        (b"echo hey\n".to_vec(), 0o700)
    );
    // The mode set back as the change left it: no conflict.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    ok(&world.undo_edit(), &world, json!({"path": "run.sh"})).await;
    assert_eq!(
        (world.read("run.sh"), mode()),
        (b"echo hi\n".to_vec(), 0o755)
    );
    // Forced, the content and the earlier mode come back.
    ok(
        &world.edit_file(),
        &world,
        json!({"path": "run.sh", "old_string": "echo hi", "new_string": "echo hey"}),
    )
    .await;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(
        &world.undo_edit(),
        &world,
        json!({"path": "run.sh", "force": true}),
    )
    .await;
    assert_eq!(
        (world.read("run.sh"), mode()),
        (b"echo hi\n".to_vec(), 0o755)
    );
}

/// A file's own mode holds for the file tools as it does for commands in
/// the same workspace (the service may run as root, which the file system
/// would let through): a read-only file is not changed, an unreadable one
/// not read, each a PERMISSION_DENIED naming the mode.
#[tokio::test]
async fn a_files_own_mode_is_kept_to() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    world.write("ro.txt", "locked\n");
    let ro = world.ws.join("ro.txt");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444)).unwrap();
    for (tool, args) in [
        (
            "edit_file",
            json!({"path": "ro.txt", "old_string": "locked", "new_string": "unlocked"}),
        ),
        ("write_file", json!({"path": "ro.txt", "content": "x"})),
    ] {
        let error = match tool {
            "edit_file" => err(&world.edit_file(), &world, args).await,
            _ => err(&world.write_file(), &world, args).await,
        };
        assert_eq!(error.code, "PERMISSION_DENIED", "{tool}: {error:?}");
        assert!(
            error.message.contains("its mode is 0444"),
            "{}",
            error.message
        );
        assert!(error.hint.unwrap().contains("chmod u+w"));
    }
    assert_eq!(world.read("ro.txt"), b"locked\n");
    // Readable still.
    let read = ok(&world.read_file(), &world, json!({"path": "ro.txt"})).await;
    assert!(read.result["content"].as_str().unwrap().contains("locked"));
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o000)).unwrap();
    let error = err(&world.read_file(), &world, json!({"path": "ro.txt"})).await;
    assert_eq!(error.code, "PERMISSION_DENIED", "{error:?}");
    assert!(
        error.message.contains("its mode is 0000"),
        "{}",
        error.message
    );
    // Nor is it changed, searched or previewed: a diff, a hint or a
    // match would quote it.
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o200)).unwrap();
    let error = err(
        &world.edit_file(),
        &world,
        json!({"path": "ro.txt", "old_string": "lockd", "new_string": "x"}),
    )
    .await;
    assert_eq!(error.code, "PERMISSION_DENIED", "{error:?}");
    assert!(!format!("{error:?}").contains("locked"), "{error:?}");
    let error = err(
        &world.grep(),
        &world,
        json!({"pattern": "lock", "path": "ro.txt"}),
    )
    .await;
    assert_eq!(error.code, "PERMISSION_DENIED", "{error:?}");
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "lock", "output_mode": "content"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!([]), "{}", found.result);
    assert_eq!(
        found.result["not_searched"][0]["path"], "ro.txt",
        "{}",
        found.result
    );
    // A new file, or one its owner may write, is written as before.
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o644)).unwrap();
    ok(
        &world.write_file(),
        &world,
        json!({"path": "ro.txt", "content": "open"}),
    )
    .await;
    assert_eq!(world.read("ro.txt"), b"open\n");
}

/// A directory's own mode holds for the file tools as for commands: one
/// its owner may not enter (`chmod 000`) is not listed, walked or passed
/// through; one its owner may not change (`chmod 555`) gets no new file.
#[tokio::test]
async fn a_directorys_own_mode_is_kept_to() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    world.write("closed/inner.txt", "secret\n");
    world.write("fixed/old.txt", "old\n");
    world.write("open/x.txt", "secret too\n");
    let set = |dir: &str, mode: u32| {
        std::fs::set_permissions(world.ws.join(dir), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set("closed", 0o000);
    set("fixed", 0o555);
    for (what, error) in [
        (
            "read",
            err(
                &world.read_file(),
                &world,
                json!({"path": "closed/inner.txt"}),
            )
            .await,
        ),
        (
            "list",
            err(&world.read_file(), &world, json!({"path": "closed"})).await,
        ),
        (
            "edit",
            err(
                &world.edit_file(),
                &world,
                json!({"path": "closed/inner.txt", "old_string": "secret", "new_string": "x"}),
            )
            .await,
        ),
        (
            "create",
            err(
                &world.write_file(),
                &world,
                json!({"path": "fixed/new.txt", "content": "x"}),
            )
            .await,
        ),
        (
            "replace",
            err(
                &world.write_file(),
                &world,
                json!({"path": "fixed/old.txt", "content": "x"}),
            )
            .await,
        ),
        (
            "grep",
            err(
                &world.grep(),
                &world,
                json!({"pattern": "secret", "path": "closed/inner.txt"}),
            )
            .await,
        ),
    ] {
        assert_eq!(error.code, "PERMISSION_DENIED", "{what}: {error:?}");
        assert!(
            !format!("{error:?}").contains("secret\n"),
            "{what}: {error:?}"
        );
    }
    // A walk leaves the closed directory out.
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "secret", "output_mode": "files_with_matches"}),
    )
    .await;
    assert_eq!(
        found.result["entries"],
        json!(["open/x.txt"]),
        "{}",
        found.result
    );
    let found = ok(&world.glob(), &world, json!({"pattern": "**/*.txt"})).await;
    assert!(
        !found.result.to_string().contains("inner.txt"),
        "{}",
        found.result
    );
    // Reading what a 555 directory holds is fine; nothing was changed.
    ok(&world.read_file(), &world, json!({"path": "fixed/old.txt"})).await;
    assert!(!world.ws.join("fixed/new.txt").exists());
    set("closed", 0o755);
    set("fixed", 0o755);
    assert_eq!(world.read("fixed/old.txt"), b"old\n");
}

/// What a model is told when it slips: a link to nothing is said to be
/// one (it was "did you mean" its own name), `~` is not expanded, an
/// old_string with CRLF on an LF file is told so; and a change's result
/// names the history entry that undoes it.
#[tokio::test]
async fn slips_get_the_hint_that_fixes_them() {
    let world = World::new();
    std::os::unix::fs::symlink("missing_target", world.ws.join("dangling")).unwrap();
    let error = err(&world.read_file(), &world, json!({"path": "dangling"})).await;
    assert_eq!(error.code, "FILE_NOT_FOUND");
    assert!(
        error
            .message
            .contains("is a symbolic link to something that does not exist"),
        "{}",
        error.message
    );
    assert!(
        !error.message.contains("missing_target"),
        "{}",
        error.message
    );

    world.write("src/core.py", "a = 1\nb = 2\n");
    let error = err(&world.read_file(), &world, json!({"path": "~/src/core.py"})).await;
    assert_eq!(error.code, "FILE_NOT_FOUND");
    let hint = error.hint.unwrap();
    assert!(
        hint.contains("'~' is not expanded")
            && hint.contains("Paths are relative to the workspace root: use 'src/core.py'."),
        "{hint}"
    );

    let error = err(
        &world.write_file(),
        &world,
        json!({"path": "~/src/new.py", "content": "x"}),
    )
    .await;
    assert_eq!(error.code, "INVALID_ARGUMENTS");
    assert!(error.hint.unwrap().contains("use 'src/new.py'"));
    assert!(!world.ws.join("~").exists());

    let error = err(
        &world.edit_file(),
        &world,
        json!({"path": "src/core.py", "old_string": "a = 1\r\nb = 2", "new_string": "x"}),
    )
    .await;
    assert_eq!(error.code, "STRING_NOT_FOUND");
    let hint = error.hint.unwrap();
    assert!(hint.contains("old_string has CRLF"), "{hint}");

    let edited = ok(
        &world.edit_file(),
        &world,
        json!({"path": "src/core.py", "old_string": "a = 1", "new_string": "a = 10"}),
    )
    .await;
    let entry = edited.result["undo_entry"].clone();
    assert_eq!(
        entry,
        edited.undo.unwrap().input["entry"],
        "{}",
        edited.result
    );
    let undone = ok(
        &world.undo_edit(),
        &world,
        json!({"path": "src/core.py", "entry": entry}),
    )
    .await;
    assert_eq!(undone.result["entry"], entry);
    assert_eq!(world.read("src/core.py"), b"a = 1\nb = 2\n");
}

/// Past the edit history's cap, an undo finding nothing left says the
/// older changes were dropped (it said only edits are recorded).
#[tokio::test]
async fn an_undo_past_the_history_says_the_rest_was_dropped() {
    let world = World::new();
    world.write("h.txt", "0\n");
    for i in 1..=22 {
        ok(
            &world.write_file(),
            &world,
            json!({"path": "h.txt", "content": i.to_string()}),
        )
        .await;
    }
    for _ in 0..20 {
        ok(&world.undo_edit(), &world, json!({"path": "h.txt"})).await;
    }
    assert_eq!(world.read("h.txt"), b"2\n");
    let error = err(&world.undo_edit(), &world, json!({"path": "h.txt"})).await;
    assert_eq!(error.code, "NOTHING_TO_UNDO");
    assert!(
        error.message.contains("the older ones were dropped"),
        "{}",
        error.message
    );
    // A file never changed by the tools is told as before.
    world.write("never.txt", "x\n");
    let error = err(&world.undo_edit(), &world, json!({"path": "never.txt"})).await;
    assert!(
        error.message.contains("only changes made by"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn undo_refuses_to_lose_changes_made_since_unless_forced() {
    let world = World::new();
    world.write("f.txt", "original\n");
    ok(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "tool"}),
    )
    .await;
    world.write("f.txt", "changed by bash\n");
    let error = err(&world.undo_edit(), &world, json!({"path": "f.txt"})).await;
    assert_eq!(error.code, "UNDO_CONFLICT");
    assert_eq!(world.read("f.txt"), b"changed by bash\n");
    ok(
        &world.undo_edit(),
        &world,
        json!({"path": "f.txt", "force": true}),
    )
    .await;
    assert_eq!(world.read("f.txt"), b"original\n");
}

/// Undoing the creation of a file that something else removed since is
/// no conflict: the file is already as the undo would leave it, and the
/// directories the change made go too.
#[tokio::test]
async fn undoing_a_creation_already_removed_succeeds() {
    let world = World::new();
    let empty = tree(&world.ws, &[]);
    ok(
        &world.write_file(),
        &world,
        json!({"path": "d/new.txt", "content": "x"}),
    )
    .await;
    std::fs::remove_file(world.ws.join("d/new.txt")).unwrap();
    let undone = ok(&world.undo_edit(), &world, json!({"path": "d/new.txt"})).await;
    assert_eq!(undone.result["action"], "removed");
    assert_eq!(empty, tree(&world.ws, &[]));
    // A file put back in its place is something else's change: kept.
    ok(
        &world.write_file(),
        &world,
        json!({"path": "e.txt", "content": "x"}),
    )
    .await;
    world.write("e.txt", "someone else's\n");
    let error = err(&world.undo_edit(), &world, json!({"path": "e.txt"})).await;
    assert_eq!(error.code, "UNDO_CONFLICT");
}

#[tokio::test]
async fn history_survives_new_tool_instances() {
    let world = World::new();
    world.write("f.txt", "before\n");
    ok(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "after"}),
    )
    .await;
    // As after a restart: new Workspaces, new tool.
    let reopened = Arc::new(
        Workspaces::new(
            &world.tmp.path().join("root"),
            &world.tmp.path().join("hist"),
        )
        .unwrap(),
    );
    UndoEdit::new(reopened)
        .execute(json!({"path": "f.txt"}), world.ctx())
        .await
        .unwrap();
    assert_eq!(world.read("f.txt"), b"before\n");
}

#[tokio::test]
async fn history_is_per_owner() {
    let world = World::new();
    ok(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "alice"}),
    )
    .await;
    let error = world
        .undo_edit()
        .execute(json!({"path": "f.txt"}), ctx_for("bob", None))
        .await
        .unwrap_err();
    assert_eq!(error.code, "NOTHING_TO_UNDO");
}

// ---------------------------------------------------------------------------
// Dry runs change nothing
// ---------------------------------------------------------------------------

#[tokio::test]
async fn dry_runs_leave_the_tree_byte_identical() {
    let world = World::new();
    world.write("f.txt", "a\nb\nc\n");
    let before = world.whole_snapshot();

    let preview = dry(
        &world.write_file(),
        &world,
        json!({"path": "new/dir/x.txt", "content": "hello"}),
    )
    .await
    .unwrap();
    assert_eq!(preview.would_affect, "new/dir/x.txt");
    assert!(preview.preview.contains("+hello"));
    assert_eq!(preview.estimated_impact["creates"], true);
    assert_eq!(preview.estimated_impact["bytes"], 6);
    assert_eq!(preview.estimated_impact["lines_added"], 1);

    let preview = dry(
        &world.write_file(),
        &world,
        json!({"path": "f.txt", "content": "a\nB\nc\n"}),
    )
    .await
    .unwrap();
    assert!(preview.preview.contains("-b\n+B\n"), "{}", preview.preview);
    assert_eq!(preview.estimated_impact["creates"], false);
    assert_eq!(preview.estimated_impact["lines_removed"], 1);

    let preview = dry(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "c", "new_string": "C"}),
    )
    .await
    .unwrap();
    assert!(preview.preview.contains("-c\n+C\n"));

    let preview = dry(
        &world.apply_diff(),
        &world,
        json!({"path": "f.txt", "diff": "@@ -1,2 +1,2 @@\n a\n-b\n+bee\n"}),
    )
    .await
    .unwrap();
    assert!(preview.preview.contains("+bee"));

    // A dry run reports the same errors as the real call.
    let error = dry(
        &world.edit_file(),
        &world,
        json!({"path": "f.txt", "old_string": "zzz", "new_string": "y"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, "STRING_NOT_FOUND");

    assert_eq!(before, world.whole_snapshot());
    let error = err(&world.undo_edit(), &world, json!({"path": "f.txt"})).await;
    assert_eq!(error.code, "NOTHING_TO_UNDO", "dry runs record no history");
}

// ---------------------------------------------------------------------------
// glob
// ---------------------------------------------------------------------------

fn set_mtime(path: &Path, secs_ago: u64) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

#[tokio::test]
async fn glob_respects_ignore_files_and_lists_newest_first() {
    let world = World::new();
    world.write(".gitignore", "target/\n*.log\n!keep.log\n");
    world.write("src/.ignore", "generated.rs\n");
    for (path, age) in [
        ("src/old.rs", 300),
        ("src/new.rs", 10),
        ("src/mid.rs", 100),
        ("src/generated.rs", 1),
        ("target/debug/out.rs", 1),
        ("app.log", 1),
        ("keep.log", 1),
        (".git/config.rs", 1),
    ] {
        world.write(path, "x\n");
        set_mtime(&world.ws.join(path), age);
    }
    let found = ok(&world.glob(), &world, json!({"pattern": "**/*.rs"})).await;
    assert_eq!(
        found.result["files"],
        json!(["src/new.rs", "src/mid.rs", "src/old.rs"])
    );
    assert!(!found.partial);
    let found = ok(
        &world.glob(),
        &world,
        json!({"pattern": "*.rs", "path": "src"}),
    )
    .await;
    assert_eq!(found.result["count"], 3);
    let found = ok(&world.glob(), &world, json!({"pattern": "*.log"})).await;
    assert_eq!(found.result["files"], json!(["keep.log"]));
    // A leading `./` is the search directory, as in a path; it matched
    // nothing.
    let found = ok(&world.glob(), &world, json!({"pattern": "./src/*.rs"})).await;
    assert_eq!(found.result["count"], 3, "{}", found.result);
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "x", "glob": "./src/*.rs", "output_mode": "count"}),
    )
    .await;
    assert_eq!(found.result["total_matches"], 3, "{}", found.result);
    // '*' does not cross directories.
    let found = ok(&world.glob(), &world, json!({"pattern": "*.rs"})).await;
    assert_eq!(found.result["count"], 0);
    let hints = world.glob().ui_hints(&json!({}), &found.result).unwrap();
    assert_eq!(hints["view"], "core.list");
}

#[tokio::test]
async fn glob_caps_its_results() {
    let world = World::new();
    for i in 0..1_005 {
        world.write(&format!("many/f{i:04}.txt"), "");
    }
    let found = ok(&world.glob(), &world, json!({"pattern": "many/*.txt"})).await;
    assert_eq!(found.result["files"].as_array().unwrap().len(), 1_000);
    assert_eq!(found.result["count"], 1_005);
    assert_eq!(found.result["truncated"], true);
    assert!(found.partial);
    let error = err(&world.glob(), &world, json!({"pattern": "a["})).await;
    assert_eq!(error.code, "INVALID_PATTERN");
    let error = err(
        &world.glob(),
        &world,
        json!({"pattern": "*", "path": "many/f0001.txt"}),
    )
    .await;
    assert_eq!(error.code, "NOT_A_DIRECTORY");
}

// ---------------------------------------------------------------------------
// grep
// ---------------------------------------------------------------------------

fn grep_world() -> World {
    let world = World::new();
    world.write("src/a.rs", "fn main() {\n    todo!();\n}\n// TODO: tidy\n");
    world.write("src/b.rs", "fn helper() {}\n");
    world.write("docs/notes.md", "todo list\n");
    world.write("bin/blob", b"todo\0binary");
    world.write(".gitignore", "ignored/\n");
    world.write("ignored/x.rs", "todo\n");
    world
}

#[tokio::test]
async fn grep_lists_matching_files_by_default() {
    let world = grep_world();
    let found = ok(&world.grep(), &world, json!({"pattern": "todo"})).await;
    assert_eq!(found.result["output_mode"], "files_with_matches");
    assert_eq!(
        found.result["entries"],
        json!(["docs/notes.md", "src/a.rs"])
    );
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "todo", "case_insensitive": true, "glob": "*.rs"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!(["src/a.rs"]));
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "fn", "path": "src/b.rs"}),
    )
    .await;
    assert_eq!(found.result["entries"], json!(["src/b.rs"]));
    let hints = world.grep().ui_hints(&json!({}), &found.result).unwrap();
    assert_eq!(hints["view"], "core.list");
}

/// A walk with the call's path rules: what they name is left out (a
/// directory whole), counted, and matched by where it really is when the
/// walk starts below a link.
#[tokio::test]
async fn walks_leave_out_what_the_path_rules_name() {
    use toolgate::permissions::{CallFacts, PathRules, RuleSet};
    let world = grep_world();
    world.write(".env", format!("todo {SECRET}\n"));
    world.write("src/.env", format!("todo {SECRET}\n"));
    world.write("secrets/key", format!("todo {SECRET}\n"));
    world.link("secrets", "s");
    let rules = RuleSet::from_lists::<&str>(
        &[],
        &[],
        &["read(**/.env)", "grep(secrets/**)", "glob(secrets/**)"],
    )
    .unwrap();
    let ctx = |tool: &str, path: &str, resolved: Option<&str>| {
        let mut ctx = world.ctx();
        ctx.path_rules = Some(Arc::new(PathRules::new(
            &RuleSet::default(),
            &rules,
            &CallFacts {
                tool_name: tool,
                aliases: &[],
                class: PermissionClass::File,
                read_only: true,
                destructive: false,
                arguments: &json!({ "path": path }),
                workspace: Some(world.ws.as_path()),
                resolved_path: resolved,
                sub_workspace: None,
                git_links: &[],
            },
        )));
        ctx
    };

    let found = world
        .grep()
        .execute(
            json!({"pattern": "todo", "output_mode": "content"}),
            ctx("grep", ".", None),
        )
        .await
        .unwrap();
    assert!(
        !found.result.to_string().contains(SECRET),
        "{}",
        found.result
    );
    assert_eq!(found.result["files_matched"], 2, "{}", found.result);
    assert_eq!(found.result["skipped_by_rules"], 3, "{}", found.result);
    assert!(
        found.result["rules_note"]
            .as_str()
            .unwrap()
            .starts_with("3 files or directories")
    );

    // Started below the link `s` → `secrets`: the entries are `s/…` by
    // name, `secrets/…` in truth.
    let found = world
        .grep()
        .execute(
            json!({"pattern": "todo", "path": "s", "output_mode": "content"}),
            ctx("grep", "s", Some("secrets")),
        )
        .await
        .unwrap();
    assert!(
        !found.result.to_string().contains(SECRET),
        "{}",
        found.result
    );
    assert_eq!(found.result["skipped_by_rules"], 1, "{}", found.result);

    let listed = world
        .glob()
        .execute(json!({"pattern": "**/*"}), ctx("glob", ".", None))
        .await
        .unwrap();
    let files = listed.result["files"].to_string();
    assert!(
        !files.contains(".env") && !files.contains("secrets/"),
        "{files}"
    );
    assert!(
        files.contains("src/a.rs") && files.contains("\"s\""),
        "{files}"
    );
    assert_eq!(listed.result["skipped_by_rules"], 3, "{}", listed.result);

    // Without rules the same walk finds everything (the rules did it).
    let found = ok(&world.grep(), &world, json!({"pattern": "todo"})).await;
    assert_eq!(found.result["skipped_by_rules"], 0);
    assert!(
        found.result["entries"].to_string().contains(".env"),
        "{}",
        found.result
    );
    assert!(found.result.get("rules_note").is_none());
}

#[tokio::test]
async fn grep_content_and_count_modes() {
    let world = grep_world();
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "(?i)todo", "output_mode": "content", "path": "src"}),
    )
    .await;
    assert_eq!(
        found.result["entries"],
        json!(["src/a.rs:2:    todo!();", "src/a.rs:4:// TODO: tidy"])
    );
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "todo!", "output_mode": "content", "context": 1, "path": "src"}),
    )
    .await;
    assert_eq!(
        found.result["entries"],
        json!([
            "src/a.rs-1-fn main() {",
            "src/a.rs:2:    todo!();",
            "src/a.rs-3-}"
        ])
    );
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "todo", "output_mode": "count", "case_insensitive": true}),
    )
    .await;
    assert_eq!(
        found.result["entries"],
        json!(["docs/notes.md:1", "src/a.rs:2"])
    );
    assert_eq!(found.result["total_matches"], 3);
}

#[tokio::test]
async fn grep_caps_output_at_head_limit() {
    let world = World::new();
    let text: String = (0..50).map(|i| format!("match {i}\n")).collect();
    world.write("many.txt", text);
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "match", "output_mode": "content", "head_limit": 10}),
    )
    .await;
    assert_eq!(found.result["entries"].as_array().unwrap().len(), 10);
    assert_eq!(found.result["truncated"], true);
    assert!(found.partial);
    let found = ok(
        &world.grep(),
        &world,
        json!({"pattern": "match", "output_mode": "content"}),
    )
    .await;
    assert_eq!(found.result["entries"].as_array().unwrap().len(), 50);
    assert!(!found.partial);
}

#[tokio::test]
async fn grep_reports_invalid_patterns() {
    let world = grep_world();
    let error = err(&world.grep(), &world, json!({"pattern": "fn ("})).await;
    assert_eq!(error.code, "INVALID_PATTERN");
    assert!(error.message.contains("regex") || error.message.contains("unclosed"));
    let error = err(&world.grep(), &world, json!({"pattern": "x", "glob": "[z"})).await;
    assert_eq!(error.code, "INVALID_PATTERN");
    let error = err(
        &world.grep(),
        &world,
        json!({"pattern": "x", "path": "nope"}),
    )
    .await;
    assert_eq!(error.code, "FILE_NOT_FOUND");
}

// ---------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------

#[tokio::test]
async fn definitions_register_and_declare_their_safety() {
    let world = World::new();
    let registry = Registry::new();
    for tool in file_tools(world.workspaces.clone(), &WorkspaceSettings::default()) {
        registry.register(tool).unwrap();
    }
    let read = world.read_file().definition();
    assert!(read.metadata.read_only && read.metadata.concurrency_safe);
    assert_eq!(read.metadata.permission_class, PermissionClass::File);
    assert_eq!(read.metadata.audit_operation, "read");
    assert_eq!(read.input_schema["required"], json!(["path"]));
    for tool in [
        Box::new(world.write_file()) as Box<dyn Tool>,
        Box::new(world.edit_file()),
        Box::new(world.apply_diff()),
    ] {
        let def = tool.definition();
        assert!(
            !def.metadata.read_only && !def.metadata.concurrency_safe,
            "{}",
            def.name
        );
        assert_eq!(def.metadata.permission_class, PermissionClass::File);
        assert!(def.capability.dry_run && def.capability.reversible);
        assert_eq!(def.capability.undo_method.as_deref(), Some("tool"));
        assert_eq!(def.capability.undo_tool_name.as_deref(), Some("undo_edit"));
        assert_eq!(def.capability.affected_resources, vec!["file"]);
    }
    assert_eq!(
        world.write_file().definition().metadata.audit_operation,
        "write"
    );
    assert_eq!(
        world.grep().definition().input_schema["required"],
        json!(["pattern"])
    );
    assert!(world.glob().definition().metadata.concurrency_safe);
}

#[tokio::test]
async fn every_success_has_ui_hints_that_compile() {
    let world = World::new();
    world.write("src/a.rs", "fn a() {}\n");
    world.write("empty.txt", "");
    world.write("sub/x.txt", "x\n");
    let calls: Vec<(Box<dyn Tool>, Value)> = vec![
        (Box::new(world.read_file()), json!({"path": "src/a.rs"})),
        (Box::new(world.read_file()), json!({"path": "empty.txt"})),
        (Box::new(world.read_file()), json!({"path": "."})),
        (Box::new(world.read_file()), json!({"path": "sub"})),
        (
            Box::new(world.write_file()),
            json!({"path": "w.txt", "content": "one"}),
        ),
        (
            Box::new(world.write_file()),
            json!({"path": "w.txt", "content": "one"}),
        ),
        (
            Box::new(world.edit_file()),
            json!({"path": "w.txt", "old_string": "one", "new_string": "two"}),
        ),
        (
            Box::new(world.apply_diff()),
            json!({"path": "w.txt", "diff": "@@ -1 +1 @@\n-two\n+three\n"}),
        ),
        (Box::new(world.undo_edit()), json!({"path": "w.txt"})),
        (Box::new(world.glob()), json!({"pattern": "**/*"})),
        (Box::new(world.glob()), json!({"pattern": "nothing*"})),
        (Box::new(world.grep()), json!({"pattern": "fn"})),
        (
            Box::new(world.grep()),
            json!({"pattern": "fn", "output_mode": "content"}),
        ),
        (Box::new(world.grep()), json!({"pattern": "zzz"})),
    ];
    for (tool, args) in calls {
        let success = ok(tool.as_ref(), &world, args.clone()).await;
        let hints = tool
            .ui_hints(&args, &success.result)
            .unwrap_or_else(|| panic!("{} {args}: no ui_hints", tool.definition().name));
        toolgate::protocol::ui_schema::compile_for(&hints, &success.result).unwrap_or_else(|e| {
            panic!(
                "{} {args}: hints {hints} do not compile: {e:?}",
                tool.definition().name
            )
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_edits_of_one_file_are_serialised() {
    let world = Arc::new(World::new());
    let original: String = (0..16).map(|i| format!("k{i}\n")).collect();
    world.write("f.txt", &original);
    let mut tasks = vec![];
    for i in 0..16 {
        let world = world.clone();
        tasks.push(tokio::spawn(async move {
            world
                .edit_file()
                .execute(
                    json!({"path": "f.txt", "old_string": format!("k{i}\n"), "new_string": format!("K{i}\n")}),
                    world.ctx(),
                )
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let edited: String = (0..16).map(|i| format!("K{i}\n")).collect();
    assert_eq!(world.read("f.txt"), edited.as_bytes(), "no edit was lost");
    for _ in 0..16 {
        ok(&world.undo_edit(), &world, json!({"path": "f.txt"})).await;
    }
    assert_eq!(world.read("f.txt"), original.as_bytes());
}
