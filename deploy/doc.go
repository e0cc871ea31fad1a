// Package deploy holds the checks of admitter's deployment files: compose.yaml, the Dockerfile,
// .dockerignore and this directory (the NATS server's configuration, Prometheus configuration
// and alerts, Grafana provisioning and the dashboard, the Helm chart under helm/admitter with its
// PrometheusRule). Neither Docker nor a cluster is needed: each file is read with its ecosystem's
// own parser (compose-spec's loader, BuildKit's Dockerfile parser and Docker's ignore-file
// matcher, nats-server's configuration parser, Prometheus' rule file and PromQL parsers, Helm's
// chart loader, values schema, template engine and linter, Kubernetes' strict decoder of its API
// types) and cross-checked against the others and against what admitter really reads, exports
// and computes (the variables of cmd/admitter/config.go, the metrics of wire/wire.go, the plans
// file parser of package plans, the partitions' mapping of package admission).
//
// It is a Go module of its own so that those parsers' dependencies stay out of admitter's. Run
// it with
//
//	cd deploy && go test ./...
//
// (`make test` does).
package deploy
