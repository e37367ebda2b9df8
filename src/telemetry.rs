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
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for name in QUIET_CRATES {
        filter = filter.add_directive(format!("{name}=info").parse().expect("a valid directive"));
    }
    // Colours only for a person at a terminal: a file, a pipe or a log
    // collector gets plain text (and `NO_COLOR` turns them off anyway).
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    if json {
        if builder.json().flatten_event(true).try_init().is_ok() {
            JSON_LOGS.store(true, Ordering::Relaxed);
        }
    } else {
        let _ = builder.try_init();
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
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
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
            // Gauges exist from the start, at zero, rather than appearing
            // with their first change.
            metrics::gauge!("toolgate_sse_subscribers").set(0.0);
            handle
        })
        .clone()
}
