# The one rocemesh image: `rocemesh server` (non-root) and `rocemesh agent` (run as root with
# the capabilities the Helm chart adds). Build: docker build -t rocemesh:0.1.0 .
# (helm/rocemesh/README.md: building and pushing for the chart.)

# Skeleton: the workspace's manifests and Cargo.lock with stub sources
# (scripts/docker-skeleton.sh). This stage reruns on every source change, but its output
# changes only with the manifests, so the dependency layer below stays cached.
FROM rust:1.95-bookworm AS skeleton
WORKDIR /src
COPY . .
RUN bash scripts/docker-skeleton.sh /skeleton

# Builder: Debian bookworm, the same glibc as the runtime stage.
FROM rust:1.95-bookworm AS builder
# The build's system packages, the same list a fresh machine installs: clang and libbpf-dev
# for the BPF object, libibverbs-dev for <infiniband/verbs.h> (libibverbs itself is loaded at
# run time).
COPY scripts/system-deps.sh /tmp/system-deps.sh
RUN bash /tmp/system-deps.sh build && rm -rf /var/lib/apt/lists/* /tmp/system-deps.sh
# No debug info in the image's binary (the workspace's release profile keeps line tables for
# profiling on a development machine): none generated, and the standard library's stripped.
ENV CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo
WORKDIR /src
# Dependency layer: every dependency compiled against the stubs; cached until a manifest or
# Cargo.lock changes.
COPY --from=skeleton /skeleton/ ./
RUN cargo build --release --locked -p rocemesh
# The whole workspace (.dockerignore leaves out target/, .git/ and local databases). Its
# files may be older than the stubs just built, so they are touched: cargo then rebuilds
# every workspace crate and none of the dependencies.
COPY . .
RUN find . -path ./target -prune -o -name '*.rs' -exec touch {} + \
 && cargo build --release --locked -p rocemesh \
 && install -D -m 0755 target/release/rocemesh /out/rocemesh \
 && if readelf -S /out/rocemesh | grep -q '\.debug_'; then echo "debug info left in rocemesh" >&2; exit 1; fi

FROM debian:bookworm-slim
# libibverbs1 + ibverbs-providers: the verbs transport (mlx5 and other providers);
# iproute2: interface and route inspection on hosts; ca-certificates: TLS endpoints.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libibverbs1 ibverbs-providers iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 rocemesh \
 && useradd --system --uid 10001 --gid rocemesh --home-dir /var/lib/rocemesh --create-home rocemesh
COPY --from=builder /out/rocemesh /usr/local/bin/rocemesh
# The server's default SQLite file lands in the working directory.
WORKDIR /var/lib/rocemesh
# Non-root by default (the server); the agent's pod sets runAsUser 0 for its capabilities.
USER 10001:10001
EXPOSE 8080 9465
ENTRYPOINT ["/usr/local/bin/rocemesh"]
CMD ["server"]
