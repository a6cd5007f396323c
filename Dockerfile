# The comb controller image: a release build without the emulator, on a distroless base,
# running as the non-root user 65532 (the chart's default securityContext: read-only root
# filesystem, no capabilities). Build at the repository's root: docker build -t comb:0.1.0 .
FROM docker.io/library/rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# --no-default-features leaves the `sandbox` feature out: no emulator is linked into the image.
RUN cargo build --release --locked -p comb-federation --no-default-features --bin comb \
 && install -D target/release/comb /out/comb

# glibc and libgcc for the Rust binary; TLS is rustls with ring, so no OpenSSL.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/comb /usr/local/bin/comb
USER 65532:65532
EXPOSE 9090 8443
ENTRYPOINT ["/usr/local/bin/comb"]
CMD ["run", "--config=/etc/comb/comb.yaml"]
