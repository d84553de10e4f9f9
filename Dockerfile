# counterlab in a container; docker-compose.yml runs it against its servers:
#   docker compose run --rm counterlab run scenarios/quickstart.toml
# Build stage: the toolchain the project is tested with.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin counterlab

# Run stage: the binary, its scenarios, nothing else (TLS roots are built in: rustls).
FROM debian:bookworm-slim
WORKDIR /app
COPY --from=build /src/target/release/counterlab /usr/local/bin/counterlab
COPY scenarios /app/scenarios
ENTRYPOINT ["counterlab"]
CMD ["run", "scenarios/quickstart.toml"]
