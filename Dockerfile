# The abacus binary in a small image. Build: docker build -t abacus .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /abacus ./cmd/abacus

FROM gcr.io/distroless/static-debian12
COPY --from=build /abacus /abacus
COPY examples/devices/abacus.yaml /etc/abacus/abacus.yaml
USER nonroot
ENTRYPOINT ["/abacus"]
