// Package api is admitter's synchronous faces: the HTTP decision API (NewHandler: POST
// /v1/decide, GET /v1/tenants/{tenant}) and the NATS micro service "admitter" (StartService:
// endpoint decide). Both read a wire.DecideRequest, ask the policy, and render its answer with
// the status, headers and body the policy gives; neither looks up a plan, checks a weight,
// applies the fail mode or maps an error to a code. The HTTP answers are written as the Go
// middleware for services that decide in process (package httplimit) writes them.
//
// It opens no listener and no connection: the caller owns the http.Server and the NATS
// connection (see cmd/admitter).
package api
