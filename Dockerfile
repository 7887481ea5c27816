# Guardian: a static binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/guardian .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/guardian /guardian
EXPOSE 8080 9090
USER nonroot:nonroot
ENTRYPOINT ["/guardian"]
CMD ["serve"]
