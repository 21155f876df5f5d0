# The one rocemesh image: `rocemesh server` (non-root) and `rocemesh agent` (run as root with
# the capabilities the Helm chart adds). Build: docker build -t rocemesh:0.1.0 .

# Builder: Debian bookworm, the same glibc as the runtime stage.
FROM rust:1.95-bookworm AS builder
# ebpf/build.rs compiles the BPF program (clang, libbpf headers) and reads struct offsets from
# <infiniband/verbs.h>; libibverbs itself is loaded at run time.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      clang libbpf-dev libibverbs-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The whole workspace (.dockerignore leaves out target/, .git/ and local databases).
COPY . .
RUN cargo build --release --locked -p rocemesh \
 && install -D -m 0755 target/release/rocemesh /out/rocemesh

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
