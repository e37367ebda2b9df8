//! Liveness, readiness and metrics: unauthenticated, for orchestrators.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = Health),
    (status = 400, description = "The path or query holds %00", content_type = "application/problem+json")))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".into(),
    })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// `ready`, or `degraded` when commands cannot run (see `sandbox.warnings`).
    pub status: String,
    /// `sqlite` or `postgres`.
    pub database: String,
    pub migrations: String,
    /// Which confinement commands run under (without file-system paths:
    /// this endpoint is unauthenticated; /v1/workspace has the detail).
    #[schema(value_type = Object)]
    pub sandbox: serde_json::Value,
}

/// One "not ready" line every 5 s at most: probes every second or two
/// during an outage would repeat it.
static NOT_READY: crate::telemetry::Throttle =
    crate::telemetry::Throttle::new(std::time::Duration::from_secs(5));

/// How long `/readyz` waits for the database.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The database is reachable and every migration is applied.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, body = Readiness),
    (status = 400, description = "The path or query holds %00", content_type = "application/problem+json"),
    (status = 503, description = "Database unreachable, migrations missing, or (SQLite) the file found damaged at start-up", content_type = "application/problem+json")))]
pub async fn readyz(State(state): State<AppState>) -> Result<axum::Json<Readiness>, ApiError> {
    // A probe answers within its own timeout (Docker's is 3 s here): a
    // database that does not answer at all is not ready, as one that
    // refuses, rather than a wait until the pool's 10 s run out.
    let ready = match tokio::time::timeout(READY_WITHIN, state.store.ready()).await {
        Ok(ready) => ready,
        Err(_) => {
            if let Some(held) = NOT_READY.allow() {
                tracing::warn!(
                    held_since_last_line = held,
                    "not ready: the database did not answer"
                );
            }
            return Err(ApiError::Unavailable(format!(
                "{} database not ready: no answer within {} s",
                state.store.backend(),
                READY_WITHIN.as_secs()
            )));
        }
    };
    match ready {
        // The database answers the check, but its last writes failed (a
        // full disk, a read-only file): nothing would be stored.
        Ok(()) if state.writer.writes_failing() => {
            if let Some(held) = NOT_READY.allow() {
                tracing::warn!(
                    held_since_last_line = held,
                    "not ready: the last writes to the database failed"
                );
            }
            Err(ApiError::Unavailable(format!(
                "{} database not ready: its last writes failed (a full disk, a read-only \
                 file, a lost connection: the service's log says which)",
                state.store.backend()
            )))
        }
        Ok(()) => {
            let status = state.sandbox.status();
            let bash_enabled = status.bash_enabled;
            let mut sandbox = serde_json::to_value(status).unwrap_or_default();
            if let Some(obj) = sandbox.as_object_mut() {
                for key in ["hidden_paths", "read_only_paths", "tmpdir", "home"] {
                    obj.remove(key);
                }
            }
            Ok(axum::Json(Readiness {
                status: if bash_enabled { "ready" } else { "degraded" }.into(),
                database: state.store.backend().into(),
                migrations: "applied".into(),
                sandbox,
            }))
        }
        Err(e) => {
            // The probe needs no token: it says what kind of trouble, and
            // the log says the rest (the database's own message may name
            // its host, database and user).
            if let Some(held) = NOT_READY.allow() {
                tracing::warn!(error = %e, held_since_last_line = held, "not ready");
            }
            let why = match e {
                // Names the migration, nothing of the database's own.
                crate::store::StoreError::NotMigrated(_)
                | crate::store::StoreError::Newer(_)
                | crate::store::StoreError::Corrupt(_) => e.to_string(),
                _ => "it refused or failed the check (the service's log says why)".to_string(),
            };
            Err(ApiError::Unavailable(format!(
                "{} database not ready: {why}",
                state.store.backend()
            )))
        }
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, content_type = "text/plain", body = String),
    (status = 400, description = "The path or query holds %00", content_type = "application/problem+json")))]
pub async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
