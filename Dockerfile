# leased in a container: built from Debian 12 packages in one stage, run
# from a slim Debian 12 with only the run-time libraries in the next.
#
#   podman build --format docker -t leased .      (or docker build)
#   podman run -d --network=host -v leased-data:/var/lib/leased leased
#
# The image runs `leased --data-dir /var/lib/leased` as user leased
# (uid 10001), listening on 127.0.0.1:7443: reachable with the host's
# network, or from containers sharing its network namespace (a sidecar).
# To serve other hosts, give it TLS (certificates on a volume) and a
# non-loopback --listen; see docs/operations.md, "Docker". leasectl is in
# the image too: `podman exec CONTAINER leasectl stats`.

FROM debian:bookworm AS build
# What the run command installs to build leased: one list, in deps.sh.
COPY tools/deps.sh /tmp/deps.sh
RUN /tmp/deps.sh run && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN meson setup /build /src --buildtype=release -Dtests=false \
      -Dprefix=/usr/local -Dwerror=true \
 && meson compile -C /build \
 && meson install -C /build --destdir /out --no-rebuild

FROM debian:bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc29 libprotobuf-c1 libuv1 libsqlite3-0 libpq5 libssl3 \
      libmicrohttpd12 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 leased \
 && useradd --system --uid 10001 --gid leased --home-dir /var/lib/leased \
      --shell /usr/sbin/nologin leased \
 && mkdir -p /var/lib/leased && chown leased:leased /var/lib/leased \
 && chmod 0700 /var/lib/leased
COPY --from=build /out/usr/local/bin/leased /out/usr/local/bin/leased-probe \
     /out/usr/local/bin/leasectl /usr/local/bin/
# leasectl's liblease, in Debian's multiarch directory (dpkg-dev, in the
# build stage, has meson put it there); ldconfig so the loader finds it.
COPY --from=build /out/usr/local/lib/ /usr/local/lib/
RUN ldconfig
USER 10001:10001
VOLUME /var/lib/leased
EXPOSE 7443
# leased-probe asks grpc.health.v1 on the first address of LEASED_LISTEN
# (127.0.0.1:7443 by default): healthy while SERVING.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/leased-probe", "--timeout", "2s"]
ENTRYPOINT ["/usr/local/bin/leased"]
CMD ["--data-dir", "/var/lib/leased"]
