//! Logging and metrics, set up once per process.

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Crates the file tools use that log what they are given (a `grep`
/// pattern, a glob) at debug and trace: a tool's arguments may hold
/// secrets, and no setting of `RUST_LOG` makes those crates log them.
const QUIET_CRATES: [&str; 4] = ["grep_regex", "grep_searcher", "globset", "ignore"];

/// Human-readable or JSON logs to stderr; `RUST_LOG` filters (default
/// `info`). Calling it twice is harmless.
pub fn init_logging(json: bool) {
    let (mut filter, unreadable) = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => match EnvFilter::try_new(&text) {
            Ok(filter) => (filter, None),
            Err(e) => (EnvFilter::new("info"), Some(e.to_string())),
        },
        _ => (EnvFilter::new("info"), None),
    };
    for name in QUIET_CRATES {
        filter = filter.add_directive(format!("{name}=info").parse().expect("a valid directive"));
    }
    // Postgres's notices (`relation "_sqlx_migrations" already exists,
    // skipping` at every start) are the server talking to itself.
    if !std::env::var("RUST_LOG").is_ok_and(|text| text.contains("sqlx")) {
        filter = filter.add_directive(
            "sqlx::postgres::notice=warn"
                .parse()
                .expect("a valid directive"),
        );
    }
    // Colours only for a person at a terminal: a file, a pipe or a log
    // collector gets plain text (and `NO_COLOR` turns them off anyway).
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let installed = if json {
        let installed = builder.json().flatten_event(true).try_init().is_ok();
        if installed {
            JSON_LOGS.store(true, Ordering::Relaxed);
        }
        installed
    } else {
        builder.try_init().is_ok()
    };
    if installed && let Some(error) = unreadable {
        tracing::warn!(
            error,
            "RUST_LOG is not a filter toolgate can read: logging at info"
        );
    }
}

static JSON_LOGS: AtomicBool = AtomicBool::new(false);

/// Whether [`init_logging`] installed JSON logs: then the error that stops
/// the process is one more JSON line, not text among them.
pub fn json_logs() -> bool {
    JSON_LOGS.load(Ordering::Relaxed)
}

/// The process-wide Prometheus recorder (tests start many servers in one
/// process; they share it).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                // Up to the longest a request (660 s by default) or a bash
                // command (600 s) may take.
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
                    60.0, 120.0, 300.0, 600.0, 900.0,
                ])
                .expect("static buckets are valid")
                .set_buckets_for_metric(
                    Matcher::Full("toolgate_writer_batch_units".into()),
                    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
                )
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (embedding); then
            // ours simply records nothing.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            // Gauges exist from the start, at zero, rather than appearing
            // with their first change.
            metrics::gauge!("toolgate_sse_subscribers").set(0.0);
            handle
        })
        .clone()
}

/// The `# HELP` text of each metric.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "toolgate_http_requests_total",
        "HTTP answers, by method, route pattern and status"
    );
    describe_histogram!(
        "toolgate_http_request_duration_seconds",
        Unit::Seconds,
        "Time to an HTTP answer's head (for a stream, until it opened)"
    );
    describe_counter!(
        "toolgate_tool_calls_total",
        "Tool call results recorded as the call's own, by tool and status"
    );
    describe_histogram!(
        "toolgate_tool_call_duration_seconds",
        Unit::Seconds,
        "Time tool calls ran, by tool"
    );
    describe_gauge!(
        "toolgate_sse_subscribers",
        "Open /events streams (AG-UI runs' streams are not counted)"
    );
    describe_histogram!(
        "toolgate_writer_batch_units",
        "Write units committed per database transaction"
    );
    describe_histogram!(
        "toolgate_writer_batch_seconds",
        Unit::Seconds,
        "Time per write transaction"
    );
    describe_gauge!(
        "toolgate_sqlite_wal_pages",
        "Pages in the SQLite write-ahead log at its last checkpoint"
    );
}

/// Lets one log line of a kind through every `every`, counting the ones it
/// held back: a flood of the same trouble (refused connections, a database
/// away) writes a line every few seconds, not one per request.
pub struct Throttle {
    every: std::time::Duration,
    last: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
}

impl Throttle {
    pub const fn new(every: std::time::Duration) -> Throttle {
        Throttle {
            every,
            last: std::sync::Mutex::new(None),
        }
    }

    /// `Some(held back since the last line)` when a line may be written now.
    pub fn allow(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        match &mut *last {
            Some((logged, held)) if now.duration_since(*logged) < self.every => {
                *held += 1;
                None
            }
            _ => {
                let held = last.map_or(0, |(_, held)| held);
                *last = Some((now, 0));
                Some(held)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Throttle;
    use std::time::Duration;

    #[test]
    fn a_throttle_lets_one_line_through_and_counts_the_rest() {
        let throttle = Throttle::new(Duration::from_millis(200));
        assert_eq!(throttle.allow(), Some(0));
        assert_eq!(throttle.allow(), None);
        assert_eq!(throttle.allow(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(throttle.allow(), Some(2));
        assert_eq!(throttle.allow(), None);
    }
}
