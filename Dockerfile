# agui-gateway container image: a build stage with the Rust toolchain, and a slim runtime stage
# holding only the binary, its default configuration and an empty data directory.
#
#   docker build -t agui-gateway .
#   docker run --rm -p 8080:8080 -v agui-data:/var/lib/agui-gateway agui-gateway
#
# The image runs `agui-gateway serve --config /etc/agui-gateway/gateway.toml` as the unprivileged
# user 10001. /etc/agui-gateway/gateway.toml is the commented built-in default; mount your own file
# there (read-only) to replace it. The environment below beats any file (docs/config.md):
# AGUI_GATEWAY_DATABASE_URL points the default SQLite database into the data volume, so for
# Postgres set AGUI_GATEWAY_DATABASE_URL=postgres://... at `docker run` time (it is also the
# place for the password), not only in the mounted file. docs/deploy.md has a compose example
# with two instances, Postgres and a proxy.
#
# Until authentication is configured the gateway serves only loopback callers: through a
# published port the API answers 401, while /livez and /readyz answer everyone (docs/config.md,
# "Who may call").
#
# Lint: scripts/hadolint (no warning may stand).

# ---- build ---------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src

# The `dist` profile (Cargo.toml, docs/deploy.md): stripped, LTO, one codegen unit; the binary
# lands in target/dist/. `release` keeps line tables for profiling and is not the one to ship.
#
# Dependencies first, against stub sources, so this layer is rebuilt only when the manifests
# or the lock file change. `bench` is a workspace member: its manifest must be present. With
# LTO, the dependencies' code is optimized again with the gateway's at the final link: this layer
# saves their compilation, not that link.
COPY Cargo.toml Cargo.lock ./
COPY bench bench
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --profile dist --locked --bin agui-gateway

# The gateway itself. Migrations and the default config are compiled into the binary.
COPY config config
COPY migrations migrations
COPY src src
# The copied sources may be older than the stub build: make cargo see them as new.
RUN touch src/main.rs src/lib.rs \
    && cargo build --profile dist --locked --bin agui-gateway

# ---- runtime -------------------------------------------------------------------------------
# The binary links glibc and libgcc only (SQLite is compiled in, and this build has no TLS
# stack: docs/config.md), so the slim base needs no extra package and no package index.
FROM debian:bookworm-slim

# The platform's trust roots for outbound HTTPS (models, tools, upstream agents, JWKS,
# PostgreSQL's verify-full); the slim image has none. Unpinned: the bundle should follow
# Debian's security updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 agui-gateway \
    && useradd --system --uid 10001 --gid agui-gateway --no-create-home \
        --home-dir /var/lib/agui-gateway --shell /usr/sbin/nologin agui-gateway \
    && mkdir -p /etc/agui-gateway /var/lib/agui-gateway \
    && chown agui-gateway:agui-gateway /var/lib/agui-gateway \
    && chmod 0750 /var/lib/agui-gateway

COPY --from=builder /src/target/dist/agui-gateway /usr/local/bin/agui-gateway
# Root-owned and read-only for the gateway's user: configuration is not the process's to change.
COPY config/gateway.toml /etc/agui-gateway/gateway.toml

ENV AGUI_GATEWAY_DATABASE_URL=sqlite:///var/lib/agui-gateway/agui-gateway.db \
    AGUI_GATEWAY_LISTEN=0.0.0.0:8080

WORKDIR /var/lib/agui-gateway
VOLUME ["/var/lib/agui-gateway"]
USER 10001:10001
EXPOSE 8080

# Healthy exactly while /readyz answers 200: the database answers and the instance is not
# draining after SIGTERM. The probe runs inside the container, so it reaches the loopback
# address whatever `listen` says, as long as the port is 8080: if you move the port, override
# the health check too (compose: `healthcheck.test`).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["agui-gateway", "healthcheck", "--timeout-secs", "3", "http://127.0.0.1:8080/readyz"]

# SIGTERM (docker stop) ends open streams resumably, hands running turns over and exits within
# turns.shutdown_grace_secs (10 s): give `docker stop --time` / the orchestrator's grace period a
# few seconds more. Arguments given to `docker run` are appended (e.g. --listen 0.0.0.0:9000);
# for another subcommand use --entrypoint agui-gateway (e.g. `check-config --config ...`).
STOPSIGNAL SIGTERM
ENTRYPOINT ["agui-gateway", "serve", "--config", "/etc/agui-gateway/gateway.toml"]
