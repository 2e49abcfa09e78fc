# The abacus binary in a small image. Build: docker build -t abacus .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version abacus version and abacus_build_info report: docker build --build-arg VERSION=v1.2.3
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/abacus-stream/abacus/app.Version=${VERSION}" -o /abacus ./cmd/abacus
# The processor's state folder (processor.storage_path of examples/devices/abacus.yaml): a volume
# mounted on a folder the image has starts with the folder's owner, so nonroot can write there.
RUN mkdir -p /state

FROM gcr.io/distroless/static-debian12
ARG VERSION=dev
LABEL org.opencontainers.image.title="abacus" org.opencontainers.image.version="${VERSION}"
COPY --from=build /abacus /abacus
COPY --from=build --chown=65532:65532 /state /var/lib/abacus/
COPY examples/devices/abacus.yaml /etc/abacus/abacus.yaml
USER nonroot
ENTRYPOINT ["/abacus"]
