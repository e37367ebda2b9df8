# syntax=docker/dockerfile:1
# toolgate: multi-stage build. Not exercised by CI (no Docker engine there).
#
#   docker build -t toolgate .
#   docker run --rm -p 8080:8080 -v toolgate-data:/data --stop-timeout 35 toolgate
#
# (--stop-timeout: SIGTERM gives in-flight calls server.shutdown_grace_secs,
# 30 s; Docker's default kills after 10 s.) The first start generates a
# signing key in /data; each start prints a dev bearer token signed with it
# (see `docker logs`). Set DATABASE_URL=postgres://… to use Postgres
# instead of the SQLite file in /data (docker-compose.yml does).

FROM rust:1-bookworm AS builder
WORKDIR /src

# Dependencies first, against stub sources, so this layer is cached until
# Cargo.toml or Cargo.lock change. The manifest declares a bench target, so
# its file must exist too.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && echo 'fn main() {}' > benches/load.rs \
    && cargo build --release --locked \
    && rm -rf src benches

# The real sources. COPY keeps the files' own modification times, which may
# be older than the stub build: touch them so cargo rebuilds the crate.
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked \
    && cp target/release/toolgate /usr/local/bin/toolgate

FROM debian:bookworm-slim
# ca-certificates for outbound TLS; curl for the health check; bash runs the
# `bash` tool's commands; tini is PID 1, forwarding signals and reaping the
# orphaned grandchildren of killed commands.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl bash tini \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 toolgate \
    && useradd --system --uid 10001 --gid toolgate --home-dir /data --shell /usr/sbin/nologin toolgate \
    && mkdir -p /data /app/config \
    && chown toolgate:toolgate /data

WORKDIR /app
COPY --from=builder /usr/local/bin/toolgate /usr/local/bin/toolgate
COPY config/default.toml /app/config/default.toml
# The image's address and data directory are defaults, the lowest layer: a
# settings file passed with --config (mounted into the container), a
# TOOLGATE_… variable or a flag still sets them. (As ENV they would beat a
# settings file.) The grep fails the build if default.toml's lines change.
RUN sed -i -e 's|^bind = "127.0.0.1:8080"$|bind = "0.0.0.0:8080"|' \
        -e 's|^data_dir = "./data"$|data_dir = "/data"|' /app/config/default.toml \
    && grep -q '^bind = "0.0.0.0:8080"$' /app/config/default.toml \
    && grep -q '^data_dir = "/data"$' /app/config/default.toml
VOLUME ["/data"]
EXPOSE 8080
USER toolgate:toolgate

# Port 8080 as bound above: a deployment that binds another port changes
# the health check with it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1

ENTRYPOINT ["/usr/bin/tini", "--", "toolgate"]
CMD ["serve"]
