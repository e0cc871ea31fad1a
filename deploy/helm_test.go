package deploy

// The Helm chart deploy/helm/admitter, rendered by Helm's own loader, values code (defaults,
// values.schema.json) and template engine, as `helm install` renders it; every object decoded
// strictly into Kubernetes' API types (unknown and duplicate fields are errors, as for the API
// server's fieldValidation=Strict); then checked against admitter: the variables it reads, the
// port it serves probes and metrics on, its plans parser, the Dockerfile's user.

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/plans"
	"github.com/distribution/reference"
	"helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubejson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// chartDir is the chart, relative to the repository root.
const chartDir = "deploy/helm/admitter"

// The release the chart is rendered as: README's `helm install admitter deploy/helm/admitter`.
var releaseOptions = common.ReleaseOptions{Name: "admitter", Namespace: "admitter", IsInstall: true, Revision: 1}

// chartValuesFiles are the values the chart is checked with: its defaults ("") and each
// ci/*-values.yaml (chart-testing's convention), relative to the chart.
func chartValuesFiles() ([]string, error) {
	found, err := filepath.Glob(filepath.Join(repo, filepath.FromSlash(chartDir), "ci", "*-values.yaml"))
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%s/ci: no *-values.yaml: the chart's options away from their defaults go unchecked", chartDir)
	}
	files := []string{""}
	for _, f := range found {
		files = append(files, "ci/"+filepath.Base(f))
	}
	return files, nil
}

// chart is the chart as Helm loads it (Chart.yaml and values.yaml checked, the schema read),
// from the stack's files.
func (s *stack) chart() (*chart.Chart, error) {
	root := filepath.Join(repo, filepath.FromSlash(chartDir))
	var files []*archive.BufferedFile
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := s.read(file)
		if err != nil {
			return err
		}
		name, err := filepath.Rel(root, file)
		files = append(files, &archive.BufferedFile{Name: filepath.ToSlash(name), Data: data})
		return err
	})
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", chartDir, err)
	}
	return ch, nil
}

// kubeDecoder reads one manifest into its API type: apimachinery's YAML serializer in strict
// mode (YAML to JSON refusing duplicate keys, then case-sensitive decoding refusing unknown
// fields), for the kinds the chart may make.
var kubeDecoder = sync.OnceValue(func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme, addMonitoring} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return kubejson.NewSerializerWithOptions(kubejson.DefaultMetaFactory, scheme, scheme, kubejson.SerializerOptions{Yaml: true, Strict: true})
})

// release is the chart rendered with one values file.
type release struct {
	values  string        // the values file, relative to the chart; "" for the defaults alone
	input   common.Values // its values
	objects []object
	notes   string // NOTES.txt, rendered
}

// object is one manifest of a release, decoded.
type object struct {
	source     string // the template it came from, relative to the chart
	kind, name string
	obj        runtime.Object
}

// render renders the chart with the values file as `helm install -f` does, splits the output
// as Helm does, and decodes each manifest; it returns what it could not render or decode.
func (s *stack) render(valuesFile string) (*release, []string) {
	r := &release{values: valuesFile, input: common.Values{}}
	ch, err := s.chart()
	if err != nil {
		return nil, []string{err.Error()}
	}
	if valuesFile != "" {
		file := filepath.Join(repo, filepath.FromSlash(chartDir), filepath.FromSlash(valuesFile))
		data, err := s.read(file)
		if err == nil {
			r.input, err = common.ReadValues(data)
		}
		if err != nil {
			return nil, []string{fmt.Sprintf("%s/%s: %v", chartDir, valuesFile, err)}
		}
	}
	if err := chartutil.ProcessDependencies(ch, r.input); err != nil {
		return nil, []string{fmt.Sprintf("%s (%s): %v", chartDir, r.valuesName(), err)}
	}
	vals, err := chartvalues.ToRenderValuesWithSchemaValidation(ch, r.input, releaseOptions, nil, false)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s (%s): %v", chartDir, r.valuesName(), err)}
	}
	var e engine.Engine
	files, err := e.RenderWithContext(context.Background(), ch, vals)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s (%s): %v", chartDir, r.valuesName(), err)}
	}
	for name, text := range files {
		if path.Base(name) == "NOTES.txt" {
			r.notes += text
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s (%s): %v", chartDir, r.valuesName(), err)}
	}
	var problems []string
	for _, h := range hooks {
		problems = append(problems, fmt.Sprintf("%s/%s (%s): %s %s is a hook: the chart has none (admitter needs no job around an install)",
			chartDir, trimChart(h.Path), r.valuesName(), h.Kind, h.Name))
	}
	for _, m := range manifests {
		o := object{source: trimChart(m.Name)}
		if m.Head != nil {
			o.kind = m.Head.Kind
			if m.Head.Metadata != nil {
				o.name = m.Head.Metadata.Name
			}
		}
		obj, _, err := kubeDecoder().Decode([]byte(m.Content), nil, nil)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r.at(o), err))
			continue
		}
		o.obj = obj
		r.objects = append(r.objects, o)
	}
	return r, problems
}

// trimChart is a rendered file's name without the chart's: templates/deployment.yaml.
func trimChart(name string) string {
	_, rest, _ := strings.Cut(name, "/")
	return rest
}

func (r *release) valuesName() string {
	if r.values == "" {
		return "default values"
	}
	return "values " + r.values
}

// at names an object in messages: deploy/helm/admitter/templates/service.yaml (default values):
// Service admitter.
func (r *release) at(o object) string {
	return fmt.Sprintf("%s/%s (%s): %s %s", chartDir, o.source, r.valuesName(), o.kind, o.name)
}

// all are the release's objects of type T.
func all[T runtime.Object](r *release) []object {
	var out []object
	for _, o := range r.objects {
		if _, ok := o.obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// named is the release's object of type T with that name, if the chart makes one.
func named[T runtime.Object](r *release, name string) (T, object, bool) {
	for _, o := range all[T](r) {
		if o.name == name {
			return o.obj.(T), o, true
		}
	}
	var zero T
	return zero, object{}, false
}

// fileVariables are admitter's variables whose value is a file's path (README, "Configuration");
// every <NAME>_FILE is one too.
var fileVariables = []string{
	"ADMITTER_PLANS_FILE", "ADMITTER_NATS_CREDS", "ADMITTER_NATS_NKEY",
	"ADMITTER_NATS_CA", "ADMITTER_NATS_CERT", "ADMITTER_NATS_KEY",
	"ADMITTER_REDIS_CA", "ADMITTER_REDIS_CERT", "ADMITTER_REDIS_KEY",
}

// checkChart: the chart renders with its defaults and with each ci/*-values.yaml, its objects
// are valid API objects, and the pods they make would run admitter as it expects.
func checkChart(s *stack) []string {
	files, err := chartValuesFiles()
	if err != nil {
		return []string{err.Error()}
	}
	problems := checkDefaultPlans(s)
	vars, err := admitterVariables()
	if err != nil {
		return append(problems, err.Error())
	}
	for _, v := range fileVariables {
		if _, ok := vars[v]; !ok {
			problems = append(problems, fmt.Sprintf("deploy/helm_test.go: fileVariables names %s, which admitter does not read", v))
		}
	}
	rules := 0
	for _, f := range files {
		r, p := s.render(f)
		problems = append(problems, p...)
		if r != nil {
			problems = append(problems, checkRelease(s, r)...)
			rules += len(all[*prometheusRule](r))
		}
	}
	if rules == 0 {
		problems = append(problems, fmt.Sprintf("%s: no values file (ci/*-values.yaml) sets prometheusRule.enabled: the chart's alerts go unchecked", chartDir))
	}
	return problems
}

// checkDefaultPlans: the chart's default plans are admitter's built-in example, as values.yaml
// says (comments aside).
func checkDefaultPlans(s *stack) []string {
	const example = "cmd/admitter/example-plans.yaml"
	uncommented := func(file string) (string, error) {
		data, err := s.read(filepath.Join(repo, filepath.FromSlash(file)))
		if err != nil {
			return "", err
		}
		text := string(data)
		if file != example {
			vals, err := common.ReadValues(data)
			if err != nil {
				return "", err
			}
			text, _ = vals["plans"].(string)
		}
		var lines []string
		for l := range strings.Lines(text) {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				lines = append(lines, l)
			}
		}
		return strings.TrimSpace(strings.Join(lines, "")), nil
	}
	chartPlans, err := uncommented(chartDir + "/values.yaml")
	if err != nil {
		return []string{err.Error()}
	}
	builtIn, err := uncommented(example)
	if err != nil {
		return []string{err.Error()}
	}
	if chartPlans != builtIn {
		return []string{fmt.Sprintf("%s/values.yaml: plans is not admitter's built-in example, %s, which its comment says it is", chartDir, example)}
	}
	return nil
}

// checkRelease checks one rendering of the chart.
func checkRelease(s *stack, r *release) []string {
	var problems []string
	for _, o := range r.objects {
		switch o.obj.(type) {
		case *appsv1.Deployment, *corev1.ConfigMap, *corev1.Secret, *corev1.Service, *corev1.ServiceAccount, *policyv1.PodDisruptionBudget:
		case *prometheusRule:
			if r.values == "" {
				problems = append(problems, fmt.Sprintf("%s: made with the default values: prometheusRule.enabled must default to false (without the Prometheus Operator's CRD the install would fail)", r.at(o)))
			}
			problems = append(problems, checkPrometheusRule(s, r, o)...)
		default:
			problems = append(problems, fmt.Sprintf("%s: a kind the chart is not expected to make", r.at(o)))
		}
	}
	if strings.TrimSpace(r.notes) == "" {
		problems = append(problems, fmt.Sprintf("%s/templates/NOTES.txt (%s): renders empty", chartDir, r.valuesName()))
	}
	deployments := all[*appsv1.Deployment](r)
	if len(deployments) != 1 {
		return append(problems, fmt.Sprintf("%s (%s): %d Deployments, want one", chartDir, r.valuesName(), len(deployments)))
	}
	o := deployments[0]
	d := o.obj.(*appsv1.Deployment)
	add := func(format string, args ...any) {
		problems = append(problems, r.at(o)+": "+fmt.Sprintf(format, args...))
	}
	pod := d.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() {
		add("spec.selector is empty or invalid (%v)", err)
	} else if !sel.Matches(podLabels) {
		add("spec.selector %s does not select the pod template's labels %s", sel, podLabels)
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if len(pod.Spec.Containers) != 1 {
		return append(problems, r.at(o)+fmt.Sprintf(": %d containers, want one (admitter)", len(pod.Spec.Containers)))
	}
	c := &pod.Spec.Containers[0]
	const cf = "spec.template.spec.containers[0]"
	if ref, err := reference.ParseNormalizedNamed(c.Image); err != nil {
		add("%s.image %q: %v", cf, c.Image, err)
	} else if tagged, ok := ref.(reference.Tagged); !isDigested(ref) && (!ok || tagged.Tag() == "latest") {
		add("%s.image %q: pin a tag, not latest (pods of one Deployment could run different builds)", cf, c.Image)
	}

	// The environment: only variables admitter reads, each once.
	vars, err := admitterVariables()
	if err != nil {
		return append(problems, err.Error())
	}
	env, set := map[string]string{}, map[string]bool{}
	for i, e := range c.Env {
		if set[e.Name] {
			add("%s.env[%d]: %s is set twice (Kubernetes keeps the last)", cf, i, e.Name)
		}
		set[e.Name], env[e.Name] = true, e.Value
		if _, reads := vars[e.Name]; strings.HasPrefix(e.Name, "ADMITTER_") && !reads {
			add("%s.env[%d]: admitter does not read %s (see the env tags in cmd/admitter/config.go and README, Configuration)", cf, i, e.Name)
		}
	}
	if !set["ADMITTER_PARTITIONS"] {
		add("ADMITTER_PARTITIONS is unset: the replicas' count of partitions would be admitter's default, not the value partitions NOTES.txt gives the mapping for")
	}
	problems = append(problems, checkNotesMapping(r, env)...)
	if !set["ADMITTER_NATS_URL"] && !set["ADMITTER_NATS_URL_FILE"] {
		add("ADMITTER_NATS_URL is unset: each pod would start an embedded NATS server of its own (and write to its read-only root filesystem)")
	}
	for u := range strings.SplitSeq(env["ADMITTER_NATS_URL"], ",") {
		if u = strings.TrimSpace(u); u != "" {
			if err := checkURL(u, "nats", "tls"); err != nil {
				add("ADMITTER_NATS_URL: %v", err)
			}
		}
	}
	if u := env["ADMITTER_REDIS_URL"]; u != "" {
		if err := checkURL(u, "redis", "rediss"); err != nil {
			add("ADMITTER_REDIS_URL: %v", err)
		}
	} else if replicas > 1 && !set["ADMITTER_REDIS_URL_FILE"] {
		add("%d replicas without ADMITTER_REDIS_URL: in-process buckets are not shared, each replica would admit every tenant's whole plan", replicas)
	}

	// Where admitter listens, the ports the container declares, the probes.
	listening := map[string]string{} // port → the variable listening on it
	httpPort, err := listenPort(env["ADMITTER_HTTP_ADDR"])
	if err != nil {
		add("ADMITTER_HTTP_ADDR: %v (admitter's default, 127.0.0.1:9090, is out of the kubelet's and Prometheus' reach)", err)
	} else {
		listening[httpPort] = "ADMITTER_HTTP_ADDR"
	}
	switch v, ok := env["ADMITTER_API_ADDR"]; {
	case !ok:
		add("ADMITTER_API_ADDR is unset: admitter's default, 127.0.0.1:9080, is out of other pods' reach; set 0.0.0.0:PORT or off")
	case v != "off":
		if port, err := listenPort(v); err != nil {
			add("ADMITTER_API_ADDR: %v", err)
		} else {
			listening[port] = "ADMITTER_API_ADDR"
		}
	}
	for i, p := range c.Ports {
		if _, ok := listening[strconv.Itoa(int(p.ContainerPort))]; !ok {
			add("%s.ports[%d] (%s) is container port %d, but admitter listens on %s", cf, i, p.Name, p.ContainerPort, describePorts(listening))
		}
	}
	for _, port := range slices.Sorted(maps.Keys(listening)) {
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == port }) {
			add("%s listens on %s, which is not among the container's ports", listening[port], port)
		}
	}
	probe := func(field string, p *corev1.Probe, want string) {
		field = cf + "." + field
		switch {
		case p == nil:
			add("%s is unset", field)
		case p.HTTPGet == nil:
			add("%s is not an HTTP GET of %s", field, want)
		case p.HTTPGet.Path != want:
			add("%s.httpGet.path is %s, want %s", field, p.HTTPGet.Path, want)
		case p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP:
			add("%s.httpGet.scheme is %s: admitter serves plain HTTP", field, p.HTTPGet.Scheme)
		default:
			if port, ok := containerPort(c, p.HTTPGet.Port); !ok {
				add("%s.httpGet.port %s is not a port of the container", field, p.HTTPGet.Port.String())
			} else if httpPort != "" && strconv.Itoa(int(port)) != httpPort {
				add("%s.httpGet.port %s is %d, but %s is served on ADMITTER_HTTP_ADDR's port, %s", field, p.HTTPGet.Port.String(), port, want, httpPort)
			}
		}
	}
	probe("livenessProbe", c.LivenessProbe, "/healthz")
	probe("readinessProbe", c.ReadinessProbe, "/readyz")

	// Prometheus' annotations: on, unless the values turn them off; then on /metrics.
	ann := pod.Annotations
	const af = "spec.template.metadata.annotations"
	if metrics, _ := r.input["metrics"].(map[string]any); metrics["scrapeAnnotations"] != false && ann["prometheus.io/scrape"] != "true" {
		add("%s: no prometheus.io/scrape: \"true\" (metrics.scrapeAnnotations is on)", af)
	}
	if ann["prometheus.io/scrape"] == "true" {
		if ann["prometheus.io/port"] != httpPort {
			add("%s: prometheus.io/port %q, but /metrics is served on ADMITTER_HTTP_ADDR's port, %s", af, ann["prometheus.io/port"], httpPort)
		}
		if ann["prometheus.io/path"] != "/metrics" {
			add("%s: prometheus.io/path %q, want /metrics", af, ann["prometheus.io/path"])
		}
	}

	// Files: every variable naming one names a file of a mounted volume, readable by the user.
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if !slices.Contains(fileVariables, name) && !strings.HasSuffix(name, "_FILE") || !strings.HasPrefix(name, "ADMITTER_") {
			continue
		}
		problems = append(problems, checkFile(r, o, pod.Spec, c, name, env[name])...)
	}
	if !set["ADMITTER_PLANS_FILE"] {
		add("ADMITTER_PLANS_FILE is unset: admitter would run its built-in example plans, not the chart's")
	}
	for _, so := range all[*corev1.Secret](r) {
		sec := so.obj.(*corev1.Secret)
		for _, k := range slices.Sorted(maps.Keys(sec.Data)) {
			if len(sec.Data[k]) == 0 {
				problems = append(problems, fmt.Sprintf("%s: data.%s is empty: admitter refuses an empty secret file", r.at(so), k))
			}
		}
	}

	// Security: not root, the Dockerfile's user, nothing written, no privilege.
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		add("%s.securityContext is unset", cf)
		csc = &corev1.SecurityContext{}
	}
	if nonRoot := cmpPtr(csc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot == nil || !*nonRoot {
		add("runAsNonRoot is not true in the pod's or the container's securityContext")
	}
	df, dp := parseDockerfile(s)
	if df == nil {
		return append(problems, dp...)
	}
	user, userAt := df.user()
	uid, _, _ := strings.Cut(user, ":")
	imageUID, uidErr := strconv.ParseInt(uid, 10, 64)
	switch runAs := cmpPtr(csc.RunAsUser, psc.RunAsUser); {
	case runAs == nil && uidErr != nil:
		add("no runAsUser, and the image's USER %q (%s) is not numeric: the kubelet cannot verify runAsNonRoot", user, userAt)
	case runAs == nil:
	case *runAs == 0:
		add("runAsUser is 0, root")
	case uidErr == nil && *runAs != imageUID:
		add("runAsUser %d is not the image's user, %d (USER %s, %s)", *runAs, imageUID, user, userAt)
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		add("%s.securityContext.readOnlyRootFilesystem is not true (admitter writes nothing outside its embedded NATS server's store, which ADMITTER_NATS_URL rules out)", cf)
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		add("%s.securityContext.allowPrivilegeEscalation is not false", cf)
	}
	if csc.Privileged != nil && *csc.Privileged {
		add("%s.securityContext.privileged is true", cf)
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		add("%s.securityContext.capabilities.drop does not drop ALL (admitter needs none)", cf)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		add("spec.template.spec.automountServiceAccountToken is not false: admitter does not talk to the Kubernetes API")
	}
	for _, so := range all[*corev1.ServiceAccount](r) {
		if pod.Spec.ServiceAccountName != so.name {
			add("spec.template.spec.serviceAccountName %q is not the chart's ServiceAccount %s", pod.Spec.ServiceAccountName, so.name)
		}
	}

	// Resources: requests to schedule by, a memory limit, no request above its limit.
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[res]; !ok || q.IsZero() {
			add("%s.resources.requests.%s is unset", cf, res)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		add("%s.resources.limits.memory is unset", cf)
	}
	for res, limit := range c.Resources.Limits {
		if req, ok := c.Resources.Requests[res]; ok && req.Cmp(limit) > 0 {
			add("%s.resources.requests.%s %s is above its limit %s", cf, res, req.String(), limit.String())
		}
	}

	// Shutdown: the kubelet waits for admitter to settle its jobs.
	if shutdown, err := time.ParseDuration(cmp.Or(env["ADMITTER_SHUTDOWN_TIMEOUT"], vars["ADMITTER_SHUTDOWN_TIMEOUT"])); err != nil {
		add("ADMITTER_SHUTDOWN_TIMEOUT: %v", err)
	} else if grace := time.Duration(cmpVal(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second; grace <= shutdown {
		add("spec.template.spec.terminationGracePeriodSeconds %s is not longer than ADMITTER_SHUTDOWN_TIMEOUT %s: the kubelet would kill admitter while it settles its jobs", grace, shutdown)
	}

	// The Service and the PodDisruptionBudget select these pods.
	for _, so := range all[*corev1.Service](r) {
		svc := so.obj.(*corev1.Service)
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if sel.Empty() || !sel.Matches(podLabels) {
			problems = append(problems, fmt.Sprintf("%s: spec.selector %s does not select the Deployment's pods (%s)", r.at(so), sel, podLabels))
		}
		served := map[string]bool{}
		for i, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target == (intstr.IntOrString{}) {
				target = intstr.FromInt32(p.Port)
			}
			if port, ok := containerPort(c, target); !ok {
				problems = append(problems, fmt.Sprintf("%s: spec.ports[%d].targetPort %s is not a port of the container", r.at(so), i, target.String()))
			} else {
				served[strconv.Itoa(int(port))] = true
			}
		}
		for _, port := range slices.Sorted(maps.Keys(listening)) {
			if !served[port] {
				problems = append(problems, fmt.Sprintf("%s: no port reaches %s's %s", r.at(so), listening[port], port))
			}
		}
	}
	if len(all[*corev1.Service](r)) == 0 {
		add("no Service reaches the pods")
	}
	for _, po := range all[*policyv1.PodDisruptionBudget](r) {
		pdb := po.obj.(*policyv1.PodDisruptionBudget)
		padd := func(format string, args ...any) {
			problems = append(problems, r.at(po)+": "+fmt.Sprintf(format, args...))
		}
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || sel.Empty() {
			padd("spec.selector is empty or invalid (%v): an empty one selects every pod of the namespace", err)
		} else if !sel.Matches(podLabels) {
			padd("spec.selector %s does not select the Deployment's pods (%s)", sel, podLabels)
		}
		switch min, max := pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable; {
		case (min == nil) == (max == nil):
			padd("set one of spec.minAvailable and spec.maxUnavailable")
		case min != nil && min.Type == intstr.Int && min.IntVal >= replicas:
			padd("spec.minAvailable %d with %d replicas: no pod could ever be evicted, and a node drain would wait for ever", min.IntVal, replicas)
		case max != nil && max.Type == intstr.Int && max.IntVal < 1:
			padd("spec.maxUnavailable %d: no pod could ever be evicted, and a node drain would wait for ever", max.IntVal)
		}
	}
	return problems
}

// checkNotesMapping: NOTES.txt gives the NATS server's account mapping that admitter needs with
// the pods' environment (ADMITTER_PARTITIONS, ADMITTER_SUBJECT_IN, ADMITTER_STREAM_IN), exactly
// the line admitter logs at start, and no other; none with one partition.
func checkNotesMapping(r *release, env map[string]string) []string {
	where := fmt.Sprintf("%s/templates/NOTES.txt (%s)", chartDir, r.valuesName())
	ps, err := partitioning(env)
	if err != nil {
		return []string{fmt.Sprintf("%s (%s): the pods' %v", chartDir, r.valuesName(), err)}
	}
	want := mappingLine(ps)
	var given []string
	for l := range strings.Lines(r.notes) {
		if strings.Contains(l, "mappings {") {
			given = append(given, strings.TrimSpace(l))
		}
	}
	var problems []string
	for _, g := range given {
		if g != want {
			problems = append(problems, fmt.Sprintf("%s: gives the NATS server %q, but the pods (ADMITTER_PARTITIONS=%d) need %s", where, g, ps.N, cmp.Or(want, "no mapping")))
		}
	}
	if want != "" && !slices.Contains(given, want) {
		problems = append(problems, fmt.Sprintf("%s: does not give the NATS server's mapping the pods (ADMITTER_PARTITIONS=%d) need: %s", where, ps.N, want))
	}
	return problems
}

// checkFile: the file variable name's value is a path in a volume the container mounts; from a
// Secret or ConfigMap, a key it projects there, which the chart's object holds, readable by the
// pod's user. The plans file is the chart's ConfigMap, mounted whole (a subPath mount never
// sees an update), and admitter's parser accepts it.
func checkFile(r *release, o object, spec corev1.PodSpec, c *corev1.Container, name, file string) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, r.at(o)+": "+name+" "+file+": "+fmt.Sprintf(format, args...))
	}
	if !path.IsAbs(file) {
		add("not an absolute path")
		return problems
	}
	var mount *corev1.VolumeMount
	rel := ""
	for i, m := range c.VolumeMounts {
		target := path.Clean(m.MountPath)
		rest, ok := strings.CutPrefix(path.Clean(file), target)
		if ok && (rest == "" || strings.HasPrefix(rest, "/") || target == "/") && (mount == nil || len(target) > len(path.Clean(mount.MountPath))) {
			mount, rel = &c.VolumeMounts[i], strings.TrimPrefix(rest, "/")
		}
	}
	if mount == nil {
		add("in no volume the container mounts: admitter could not read it")
		return problems
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 {
		add("volumeMount %s names no volume of the pod", mount.Name)
		return problems
	}
	vol := spec.Volumes[i]
	if mount.SubPath != "" {
		if name == "ADMITTER_PLANS_FILE" {
			add("mounted with subPath %s: the kubelet never updates a subPath mount, so new plans would not reach running pods", mount.SubPath)
		}
		rel = path.Join(mount.SubPath, rel)
	}
	var (
		items   []corev1.KeyToPath
		mode    *int32
		data    map[string]string // the chart's object's keys, nil when it is not the chart's
		source  object
		isChart bool
	)
	switch {
	case vol.Secret != nil:
		items, mode = vol.Secret.Items, vol.Secret.DefaultMode
		if sec, so, ok := named[*corev1.Secret](r, vol.Secret.SecretName); ok {
			data, source, isChart = map[string]string{}, so, true
			for k, v := range sec.Data {
				data[k] = string(v)
			}
			maps.Copy(data, sec.StringData)
		}
	case vol.ConfigMap != nil:
		items, mode = vol.ConfigMap.Items, vol.ConfigMap.DefaultMode
		if cm, co, ok := named[*corev1.ConfigMap](r, vol.ConfigMap.Name); ok {
			data, source, isChart = cm.Data, co, true
		}
	}
	if name == "ADMITTER_PLANS_FILE" && (vol.ConfigMap == nil || !isChart) {
		add("volume %s is not the chart's plans ConfigMap", vol.Name)
		return problems
	}
	if vol.Secret == nil && vol.ConfigMap == nil {
		return problems // an emptyDir, a CSI driver's: nothing more to know
	}
	key := rel
	if items != nil {
		j := slices.IndexFunc(items, func(it corev1.KeyToPath) bool { return path.Clean(it.Path) == rel })
		if j < 0 {
			add("volume %s projects no file %s (its items: %s)", vol.Name, rel, describeItems(items))
			return problems
		}
		key = items[j].Key
		if items[j].Mode != nil {
			mode = items[j].Mode
		}
	}
	if isChart {
		content, ok := data[key]
		if !ok {
			add("%s %s has no key %s", source.kind, source.name, key)
			return problems
		}
		if name == "ADMITTER_PLANS_FILE" {
			if _, err := plans.Parse(key, []byte(content)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", r.at(source), err))
			}
		}
	}
	perm := int32(0o644) // the kubelet's default for Secret and ConfigMap volumes
	if mode != nil {
		perm = *mode
	}
	fsGroup := spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil
	if perm&0o004 == 0 && !(fsGroup && perm&0o040 != 0) {
		add("mode %#o of volume %s leaves the file unreadable to admitter's user (files are root's; only an fsGroup with group read lets a non-root user read them)", perm, vol.Name)
	}
	return problems
}

func describeItems(items []corev1.KeyToPath) string {
	var out []string
	for _, it := range items {
		out = append(out, it.Key+"→"+it.Path)
	}
	return strings.Join(out, ", ")
}

// containerPort is the number of the container's port named or numbered by p.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// checkURL: raw is a URL of one of the schemes, with a host.
func checkURL(raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%q: scheme %q, want %s", raw, u.Scheme, strings.Join(schemes, " or "))
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q: no host", raw)
	}
	return nil
}

// cmpPtr is the container's setting, else the pod's.
func cmpPtr[T any](container, pod *T) *T {
	if container != nil {
		return container
	}
	return pod
}

func cmpVal[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func TestHelmChart(t *testing.T) { report(t, checkChart) }

// checkHelmLint: `helm lint` (Helm's own linter: Chart.yaml, the values against the schema, each
// template rendered in lint mode and read back, object names, deprecated APIs) finds nothing
// above INFO with the chart's defaults or with any ci values file. The linter reads a
// directory: an edited chart is written to a temporary one.
func checkHelmLint(s *stack) []string {
	files, err := chartValuesFiles()
	if err != nil {
		return []string{err.Error()}
	}
	root := filepath.Join(repo, filepath.FromSlash(chartDir))
	dir := root
	if len(s.edited) > 0 {
		if dir, err = os.MkdirTemp("", "admitter-chart-"); err != nil {
			return []string{err.Error()}
		}
		defer os.RemoveAll(dir)
		err = filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := s.read(file)
			if err != nil {
				return err
			}
			name, _ := filepath.Rel(root, file)
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, name), data, 0o644)
		})
		if err != nil {
			return []string{err.Error()}
		}
	}
	var problems []string
	for _, f := range files {
		vals := common.Values{}
		if f != "" {
			if vals, err = common.ReadValuesFile(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
				problems = append(problems, err.Error())
				continue
			}
		}
		for _, m := range lint.RunAll(dir, vals, releaseOptions.Namespace).Messages {
			if m.Severity > support.InfoSev {
				problems = append(problems, fmt.Sprintf("helm lint %s (%s): %v", chartDir, cmp.Or(f, "default values"), m))
			}
		}
	}
	return problems
}

func TestHelmLint(t *testing.T) { report(t, checkHelmLint) }

func TestHelmChecksCatch(t *testing.T) {
	const (
		values     = chartDir + "/values.yaml"
		existing   = chartDir + "/ci/existing-secret-values.yaml"
		deployment = chartDir + "/templates/deployment.yaml"
	)
	t.Run("render", func(t *testing.T) {
		// What Helm itself refuses: the schema, the chart's own guards, a template error.
		catches(t, values, checkChart, []breakage{
			{"replicaCount: 2", "replicas: 2", "additional properties 'replicas' not allowed"},
			{"replicaCount: 2", `replicaCount: "2"`, "at '/replicaCount': got string, want integer"},
			{"  url: redis://redis:6379", `  url: ""`, "redis.url is empty: admitter would use in-process buckets"},
			{"  url: nats://nats:4222", `  url: ""`, "at '/nats/url': minLength: got 0, want 1"},
			{"  minAvailable: \"\"", "  minAvailable: most", "at '/podDisruptionBudget/minAvailable'"},
			{"env: {}", "env: {ADMITTER_HTTP_ADDR: 0.0.0.0:9090}", "env.ADMITTER_HTTP_ADDR: the chart sets it"},
			{"env: {}", `env: {ADMITTER_PARTITIONS: "8"}`, "env.ADMITTER_PARTITIONS: the chart sets it"},
			{"partitions: 1", "partitions: 0", "at '/partitions': minimum: got 0, want 1"},
			{"partitions: 1", "partitions: 65", "at '/partitions': maximum: got 65, want 64"},
		})
		catches(t, existing, checkChart, []breakage{
			{"[nats.creds, redis-password,", "[nats.creds, nats-token, redis-password,", "the Secret's nats.creds and nats-token are ways to authenticate to NATS: admitter takes one"},
			{"[nats.creds, redis-password,", "[nats.creds, redis-pass,", "at '/secrets/existingSecretKeys/1'"},
		})
	})
	t.Run("decode", func(t *testing.T) {
		// What the API server refuses: unknown and duplicate fields, values of the wrong type.
		catches(t, deployment, checkChart, []breakage{
			{"  replicas: {{", "  replica: {{", `unknown field "spec.replica"`},
			{"          imagePullPolicy: {{ .Values.image.pullPolicy }}\n", "          imagePullPolicy: {{ .Values.image.pullPolicy }}\n          imagePullPolicy: Always\n", `key "imagePullPolicy" already set in map`},
			{"              containerPort: {{ .Values.http.port }}", "              containerPort: \"{{ .Values.http.port }}\"", "cannot unmarshal string into Go struct field ContainerPort"},
		})
		catches(t, values, checkChart, []breakage{
			{"    memory: 512Mi", "    memory: 512MB", "quantities must match the regular expression"},
		})
	})
	t.Run("admitter", func(t *testing.T) {
		// What admitter, its Dockerfile or Kubernetes would not run as intended.
		catches(t, values, checkChart, []breakage{
			{"env: {}", "env: {ADMITTER_PARK_MAX: \"1000\"}", "admitter does not read ADMITTER_PARK_MAX"},
			{"    acme: gold", "    acme: pro", "values.yaml: plans is not admitter's built-in example"},
			{"rate: 2/s}", "rate: 2/fortnight}", "ConfigMap admitter-plans: plans: plans.yaml:4: plans.free.limits[0].rate"},
			{"readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "securityContext.readOnlyRootFilesystem is not true"},
			{"allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "securityContext.allowPrivilegeEscalation is not false"},
			{"  runAsNonRoot: true", "  runAsNonRoot: false", "runAsNonRoot is not true"},
			{"  runAsUser: 65532", "  runAsUser: 1000", "runAsUser 1000 is not the image's user, 65532 (USER 65532:65532, Dockerfile:"},
			{"    drop: [ALL]", "    drop: [NET_RAW]", "capabilities.drop does not drop ALL"},
			{"terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 10", "terminationGracePeriodSeconds 10s is not longer than ADMITTER_SHUTDOWN_TIMEOUT 10s"},
			{"    cpu: 100m\n", "    cpu: 2\n", "resources.requests.cpu 2 is above its limit 1"},
			{"  url: nats://nats:4222", "  url: http://nats:4222", `ADMITTER_NATS_URL: "http://nats:4222": scheme "http", want nats or tls`},
		})
		catches(t, deployment, checkChart, []breakage{
			{"path: /readyz", "path: /ready", "readinessProbe.httpGet.path is /ready, want /readyz"},
			{"              path: /healthz\n              port: http", "              path: /healthz\n              port: api", "livenessProbe.httpGet.port api is 9080, but /healthz is served on ADMITTER_HTTP_ADDR's port, 9090"},
			{`value: "0.0.0.0:{{ .Values.http.port }}"`, `value: "127.0.0.1:{{ .Values.http.port }}"`, `ADMITTER_HTTP_ADDR: "127.0.0.1:9090" listens on 127.0.0.1 only`},
			{`"0.0.0.0:{{ .Values.api.port }}"`, `"0.0.0.0:{{ .Values.http.port }}"`, "containers[0].ports[1] (api) is container port 9080, but admitter listens on 9090 (ADMITTER_API_ADDR)"},
			{"prometheus.io/port: {{ .Values.http.port | quote }}", "prometheus.io/port: {{ .Values.api.port | quote }}", `prometheus.io/port "9080", but /metrics is served on ADMITTER_HTTP_ADDR's port, 9090`},
			{"prometheus.io/path: /metrics", "prometheus.io/path: /", `prometheus.io/path "/", want /metrics`},
			{"value: /etc/admitter/plans/plans.yaml", "value: /etc/admitter/plans.yaml", "ADMITTER_PLANS_FILE /etc/admitter/plans.yaml: in no volume the container mounts"},
			{"value: /etc/admitter/plans/plans.yaml", "value: /etc/admitter/plans/admitter.yaml", "ADMITTER_PLANS_FILE /etc/admitter/plans/admitter.yaml: ConfigMap admitter-plans has no key admitter.yaml"},
			{"              mountPath: /etc/admitter/plans\n", "              mountPath: /etc/admitter/plans/plans.yaml\n              subPath: plans.yaml\n", "mounted with subPath plans.yaml: the kubelet never updates a subPath mount"},
			{"value: /etc/admitter/secrets/{{ .key }}", "value: /run/secrets/{{ .key }}", "ADMITTER_NATS_CREDS /run/secrets/nats.creds: in no volume the container mounts"},
			{"                path: {{ .key }}", "                path: {{ .key }}.txt", "ADMITTER_HTTP_TOKEN_FILE /etc/admitter/secrets/http-token: volume secrets projects no file http-token"},
			{"defaultMode: 0440", "defaultMode: 0400", "mode 0400 of volume secrets leaves the file unreadable to admitter's user"},
			{"      automountServiceAccountToken: false\n", "", "automountServiceAccountToken is not false"},
			{"      serviceAccountName: {{", "      serviceAccountName: x{{", `serviceAccountName "xrate-admitter" is not the chart's ServiceAccount rate-admitter`},
			{"          env:\n", "          env:\n            - name: ADMITTER_NATS_URL\n              value: nats://other:4222\n", "ADMITTER_NATS_URL is set twice"},
		})
		// The NATS server's mapping NOTES.txt gives, against admitter's for the pods' environment.
		catches(t, deployment, checkChart, []breakage{
			{"value: {{ .Values.partitions | int | quote }}", `value: "4"`, `gives the NATS server "mappings { \"work.*.*.>\": \"admitter.WORK.8.{{partition(8,2)}}`},
			{"            - name: ADMITTER_PARTITIONS\n              value: {{ .Values.partitions | int | quote }}\n", "", "ADMITTER_PARTITIONS is unset"},
		})
		catches(t, chartDir+"/templates/_helpers.tpl", checkChart, []breakage{
			{"$n $n $tenantAt", "$n $n 1", `but the pods (ADMITTER_PARTITIONS=8) need mappings { "work.*.*.>": "admitter.WORK.8.{{partition(8,2)}}.work.{{wildcard(1)}}.{{wildcard(2)}}.>" }`},
			{`(eq . "{tenant}") (eq . "*")`, `(eq . "{tenant}")`, `need mappings { "work.*.*.>"`},
			{`default "JOBS"`, `default "INPUT"`, `(values ci/chart-secret-values.yaml): gives the NATS server "mappings { \"jobs.submit.*.>\": \"admitter.INPUT.4.`},
		})
		catches(t, chartDir+"/templates/NOTES.txt", checkChart, []breakage{
			{"  {{ . }}\n", "", `(values ci/chart-secret-values.yaml): does not give the NATS server's mapping the pods (ADMITTER_PARTITIONS=4) need: mappings { "jobs.submit.*.>": "admitter.JOBS.4.{{partition(4,1)}}.jobs.submit.{{wildcard(1)}}.>" }`},
		})
		catches(t, chartDir+"/ci/chart-secret-values.yaml", checkChart, []breakage{
			{"minAvailable: 50%", "minAvailable: 4", "PodDisruptionBudget admitter: spec.minAvailable 4 with 4 replicas: no pod could ever be evicted"},
		})
		catches(t, chartDir+"/templates/pdb.yaml", checkChart, []breakage{
			{"  {{- if ne (toString .minAvailable) \"\" }}", "  maxUnavailable: 1\n  {{- if ne (toString .minAvailable) \"\" }}", "PodDisruptionBudget admitter: set one of spec.minAvailable and spec.maxUnavailable"},
			{"      {{- include \"admitter.selectorLabels\" $ | nindent 6 }}", "      app: admitter", "PodDisruptionBudget admitter: spec.selector app=admitter does not select the Deployment's pods"},
		})
		catches(t, chartDir+"/templates/service.yaml", checkChart, []breakage{
			{"targetPort: api", "targetPort: grpc", "Service admitter: spec.ports[1].targetPort grpc is not a port of the container"},
			{"    {{- include \"admitter.selectorLabels\" . | nindent 4 }}", "    app: admitter", "Service admitter: spec.selector app=admitter does not select the Deployment's pods"},
		})
		catches(t, existing, checkHelmLint, []breakage{
			{"fullnameOverride: rate-admitter", "fullnameOverride: Rate_Admitter", "object name does not conform to Kubernetes naming requirements"},
		})
		catches(t, chartDir+"/templates/secret.yaml", checkChart, []breakage{
			{"{{ .key }}: {{", "{{ .key }}-x: {{", "Secret admitter has no key nats-password"},
		})
	})
}
