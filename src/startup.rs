//! Builds the application: settings → store → writer → registry → engine →
//! router, bound to a listener. Tests start exactly this on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use secrecy::ExposeSecret;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{KeySource, Keys};
use crate::config::Settings;
use crate::engine::{Engine, EngineConfig, publish_hook};
use crate::events::EventBus;
use crate::http::{self, AppState};
use crate::store::writer::{Writer, WriterConfig};
use crate::tools::{Registry, builtin};

pub struct Application {
    listener: TcpListener,
    state: AppState,
    pub dev_token: Option<String>,
}

/// The registry with the built-in tools.
pub fn builtin_registry(settings: &Settings) -> anyhow::Result<Arc<Registry>> {
    let registry = Registry::new();
    registry.register(Arc::new(builtin::Echo))?;
    registry.register(Arc::new(builtin::Wait {
        max_ms: settings.tools.wait_max_ms,
    }))?;
    Ok(Arc::new(registry))
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        let data_dir = settings.storage.data_dir.clone();
        let database_url = settings
            .storage
            .database_url
            .as_ref()
            .map(|s| s.expose_secret().to_string());
        let store = crate::store::open(database_url.as_deref(), &data_dir).await?;
        let keys = Keys::load(&settings.auth, &data_dir)?;
        let dev_token = match keys.source {
            KeySource::Configured => None,
            _ => Some(keys.mint("dev", settings.auth.dev_token_ttl_secs)?),
        };
        let bus = Arc::new(EventBus::new(1024));
        let writer = Writer::spawn(
            store.clone(),
            WriterConfig {
                max_batch: settings.storage.writer_max_batch.max(1),
                linger: Duration::from_millis(settings.storage.writer_linger_ms),
                ..WriterConfig::default()
            },
            publish_hook(bus.clone()),
        );
        let registry = builtin_registry(&settings)?;
        let engine = Arc::new(Engine::new(
            registry,
            store.clone(),
            writer.clone(),
            EngineConfig {
                tool_timeout: Duration::from_secs(settings.tools.timeout_secs.max(1)),
            },
        ));
        let recovered = engine.recover_interrupted().await?;
        if recovered > 0 {
            tracing::warn!(
                count = recovered,
                "finished tool calls interrupted by the previous shutdown"
            );
        }
        let listener = TcpListener::bind(settings.server.bind).await?;
        let limits_settings = settings.tools.clone();
        let state = AppState {
            engine,
            store,
            writer,
            bus,
            keys: Arc::new(keys),
            settings: Arc::new(settings),
            metrics: crate::telemetry::metrics_handle(),
            limits: Arc::new(crate::engine::limits::Limits::new(
                limits_settings.max_concurrent_calls,
                limits_settings.max_concurrent_calls_per_owner,
            )),
            shutdown: CancellationToken::new(),
        };
        Ok(Application {
            listener,
            state,
            dev_token,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// A handle that stops the server (open SSE streams end with RUN_FINISHED).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// The live registry: tools registered here are served at once.
    pub fn registry(&self) -> Arc<Registry> {
        self.state.engine.registry().clone()
    }

    pub fn backend(&self) -> &'static str {
        self.state.store.backend()
    }

    /// Serve until the shutdown token is cancelled.
    pub async fn run(self) -> anyhow::Result<()> {
        let shutdown = self.state.shutdown.clone();
        let app = http::router(self.state);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await?;
        Ok(())
    }
}
