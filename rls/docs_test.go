package rls

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestEnvoyYAML: the envoy.yaml of docs/envoy.md is an Envoy bootstrap that Envoy's own Go
// types accept — every field known, every typed_config resolved, every validation rule of the
// protos met — with the rate_limit filter on admitter's default domain and a request_headers
// action keyed by its default descriptor key, calling the cluster that health-checks the
// service admitter registers.
func TestEnvoyYAML(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("docs/envoy.md has no ```yaml block")
	}
	var tree any
	if err := yaml.Unmarshal([]byte(block), &tree); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := validate(boot.ProtoReflect()); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}

	var hcm hcmv3.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitfilterv3.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if rl.GetDomain() != DefaultDomain || cluster == "" {
		t.Errorf("rate_limit filter: domain %q, cluster %q", rl.GetDomain(), cluster)
	}
	action := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()[0].GetActions()[0].GetRequestHeaders()
	if action.GetDescriptorKey() != DefaultDescriptorKey {
		t.Errorf("rate limit action: %v, want descriptor_key %q", action, DefaultDescriptorKey)
	}
	found := false
	for _, c := range boot.GetStaticResources().GetClusters() {
		if c.GetName() == cluster {
			found = c.GetHealthChecks()[0].GetGrpcHealthCheck().GetServiceName() == "envoy.service.ratelimit.v3.RateLimitService"
		}
	}
	if !found {
		t.Errorf("no cluster %s health-checking envoy.service.ratelimit.v3.RateLimitService", cluster)
	}
}

// validate applies the protos' validation rules (protoc-gen-validate) to m and to every message
// in it, typed_config (Any) included, which the generated ValidateAll does not open.
func validate(m protoreflect.Message) error {
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
		}
		return validate(inner.ProtoReflect())
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = validate(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = validate(mv.Message())
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = validate(v.Message())
		}
		return err == nil
	})
	return err
}
