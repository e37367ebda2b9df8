//! The README's walk through the API, run as written: every `sh` block of
//! its "A walk through the API" and "Errors" sections, in order, through
//! `sh` and the real `curl`, against the real server. A command the README
//! shows succeeding must answer 2xx, the one it shows failing must fail,
//! and each answer the README prints after a block must carry the JSON
//! keys shown there. A README that drifts from the service fails here.

mod common;

use std::time::Duration;

use common::{Backend, TestApp};

/// One `sh` block and the answer the README shows after it, if any.
struct Block {
    line: usize,
    script: String,
    shown: Option<String>,
}

/// The `sh` blocks between the `## ` headings `from` and `to`.
fn blocks(readme: &str, from: &str, to: &str) -> Vec<Block> {
    let start = readme.find(from).expect("the walk-through heading");
    let end = start + readme[start..].find(to).expect("the heading after it");
    let first_line = readme[..start].lines().count();
    let mut blocks: Vec<Block> = Vec::new();
    let mut fence: Option<(bool, usize, String)> = None; // (sh?, line, text)
    for (i, line) in readme[start..end].lines().enumerate() {
        match (&mut fence, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                fence = Some((lang.trim() == "sh", first_line + i + 1, String::new()))
            }
            (Some(_), Some(_)) => {
                let (sh, at, text) = fence.take().unwrap();
                if sh {
                    blocks.push(Block {
                        line: at,
                        script: text,
                        shown: None,
                    });
                } else if let Some(last) = blocks.last_mut().filter(|b| b.shown.is_none()) {
                    last.shown = Some(text);
                }
            }
            (Some((_, _, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The quoted JSON keys of `text` (`"key":`).
fn keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\":") {
        let before = &rest[..at];
        if let Some(open) = before.rfind('"') {
            let key = &before[open + 1..];
            if !key.is_empty()
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !keys.iter().any(|k| k == key)
            {
                keys.push(key.to_string());
            }
        }
        rest = &rest[at + 2..];
    }
    keys
}

/// `curl` for the blocks: a 4xx or 5xx answer fails the command, and an
/// event stream (`-N`), which stays open, is read for a few seconds.
const PRELUDE: &str = r#"set -e
curl() {
  case " $* " in
    *" -N "*)
      # $STREAMING appears with the stream's first line (it has subscribed).
      { rc=0; command curl --max-time 5 "$@" || rc=$?; echo "$rc" > "$STREAMING.rc"; } |
        while IFS= read -r line; do : > "$STREAMING"; printf '%s\n' "$line"; done
      rc=$(cat "$STREAMING.rc")
      [ "$rc" -eq 28 ] && return 0
      return "$rc" ;;
    *) command curl --fail-with-body "$@" ;;
  esac
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_runs_as_written() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let blocks = blocks(&readme, "## A walk through the API", "## Configuration");
    assert!(blocks.len() >= 15, "{} blocks", blocks.len());
    let app = TestApp::spawn(Backend::Sqlite).await;
    let work = tempfile::tempdir().unwrap();
    let mut ran = 0;
    let mut watching = Vec::new();
    for block in &blocks {
        // The set-up block: this test provides $TOKEN and $TG itself.
        if block.script.contains("cargo ") {
            continue;
        }
        let script = &block.script;
        let streaming = work.path().join(format!("streaming-{}", block.line));
        let command = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{PRELUDE}{script}"))
            .env("TG", app.base.trim_end_matches('/'))
            .env("TOKEN", &app.token)
            .env("STREAMING", &streaming)
            .current_dir(work.path())
            .output();
        let line = block.line;
        let running = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(60), command)
                .await
                .unwrap_or_else(|_| panic!("README line {line}: no answer in 60 s"))
                .expect("sh and curl on PATH")
        });
        // An event stream watches, as in its own terminal, while the
        // blocks after it run (once it is subscribed); the rest run one
        // after the other.
        if block.script.contains("curl -N") {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !streaming.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "README line {line}: the stream sent nothing"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            watching.push((block, running));
        } else {
            check(block, running.await.unwrap());
        }
        ran += 1;
    }
    for (block, running) in watching {
        check(block, running.await.unwrap());
    }
    assert!(ran >= 14, "{ran} blocks ran");
}

/// What a block's run must show: success (or the failure the README shows),
/// a stream's first event, and the keys of the README's answer.
fn check(block: &Block, output: std::process::Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!(
        "README line {}:\n{}\n-- stdout:\n{stdout}\n-- stderr:\n{stderr}",
        block.line, block.script
    );
    // The one block the README shows failing: arguments with a typo.
    let shown_failing = block.script.contains("\"txt\": \"typo\"");
    assert_eq!(output.status.success(), !shown_failing, "{context}");
    if block.script.contains("curl -N") {
        assert!(
            stdout.contains("data: {\"type\":\"RUN_STARTED\""),
            "{context}"
        );
    }
    if let Some(shown) = &block.shown {
        for key in keys(shown) {
            assert!(
                stdout.contains(&format!("\"{key}\":")),
                "the README shows the key {key:?}, the answer lacks it\n{context}"
            );
        }
    }
}

#[test]
fn blocks_and_shown_answers_are_read_from_markdown() {
    let text = "intro\n## Walk\n```sh\ncurl a\n```\n\n```json\n{\"x\": 1, \"y_2\": {\"z\": 3}}\n```\n\
                ```sh\ncurl b\n```\n```sh\ncurl c\n```\n```\nplain \"k\": 1\n```\n## Next\n```sh\nno\n```\n";
    let found = blocks(text, "## Walk", "## Next");
    let scripts: Vec<&str> = found.iter().map(|b| b.script.as_str()).collect();
    assert_eq!(scripts, ["curl a\n", "curl b\n", "curl c\n"]);
    assert_eq!(found[0].line, 3);
    assert_eq!(keys(found[0].shown.as_deref().unwrap()), ["x", "y_2", "z"]);
    assert!(found[1].shown.is_none());
    assert_eq!(keys(found[2].shown.as_deref().unwrap()), ["k"]);
}
