package deploy

// The Dockerfile, parsed by BuildKit's own parser (what `docker build` runs), and .dockerignore,
// matched by Docker's own pattern matcher.

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	dockerparser "github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerfile is the Dockerfile the admitter service is built with, parsed.
type dockerfile struct {
	file, context string // absolute paths
	stages        []instructions.Stage
	args          shell.EnvGetter // the global ARGs' defaults and BuildKit's platform ARGs
}

// at is file:line of an instruction, for messages.
func (d *dockerfile) at(loc []dockerparser.Range) string {
	if len(loc) > 0 {
		return fmt.Sprintf("%s:%d", rel(d.file), loc[0].Start.Line)
	}
	return rel(d.file)
}

// parseDockerfile finds the admitter service's Dockerfile in compose.yaml and parses it, with
// the lint rules BuildKit applies while parsing (`docker build --check` reports them) as
// problems.
func parseDockerfile(s *stack) (*dockerfile, []string) {
	svc, err := s.service("admitter")
	if err != nil {
		return nil, []string{err.Error()}
	}
	if svc.Build == nil {
		return nil, []string{"compose.yaml: services.admitter.build is unset"}
	}
	d := &dockerfile{context: svc.Build.Context, file: filepath.Join(svc.Build.Context, svc.Build.Dockerfile)}
	data, err := s.read(d.file)
	if err != nil {
		return nil, []string{fmt.Sprintf("compose.yaml: services.admitter.build: %v", err)}
	}
	res, err := dockerparser.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", rel(d.file), err)}
	}
	var problems []string
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %s", rel(d.file), line, w.Short))
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []dockerparser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %s (BuildKit lint rule %s)", rel(d.file), line, msg, rule))
	}})
	stages, meta, err := instructions.Parse(res.AST, lint)
	if err != nil { // the error names the line
		return nil, append(problems, fmt.Sprintf("%s: %v", rel(d.file), err))
	}
	d.stages = stages
	env := []string{"BUILDPLATFORM=linux/amd64", "TARGETPLATFORM=linux/amd64", "TARGETOS=linux", "TARGETARCH=amd64"}
	for _, a := range meta {
		for _, kv := range a.Args {
			if kv.Value != nil {
				env = append(env, kv.Key+"="+*kv.Value)
			}
		}
	}
	d.args = shell.EnvsFromSlice(env)
	return d, problems
}

// image is a stage's base image, the global ARGs expanded, parsed as Docker parses references;
// nil for a stage built on another stage or on scratch.
func (d *dockerfile) image(st instructions.Stage) (reference.Named, error) {
	base, _, err := shell.NewLex('\\').ProcessWord(st.BaseName, d.args)
	if err != nil {
		return nil, err
	}
	if base == "scratch" || slices.ContainsFunc(d.stages, func(o instructions.Stage) bool { return o.Name != "" && o.Name == strings.ToLower(base) }) {
		return nil, nil
	}
	return reference.ParseNormalizedNamed(base)
}

// user is the USER the image runs as (the last stage's last USER instruction, unexpanded) and
// where it is set; "" when the last stage sets none.
func (d *dockerfile) user() (user, at string) {
	for _, c := range d.stages[len(d.stages)-1].Commands {
		if c, ok := c.(*instructions.UserCommand); ok {
			user, at = c.User, d.at(c.Location())
		}
	}
	return user, at
}

// findGoBuild looks for `go build ... ./cmd/admitter` in a RUN command's words (split as the
// shell splits them) and reports the -o path and whether CGO_ENABLED=0 is assigned before it.
func findGoBuild(words []string) (found bool, output string, cgoOff bool) {
	for i := 0; i+1 < len(words); i++ {
		if path.Base(words[i]) != "go" || words[i+1] != "build" {
			continue
		}
		args := words[i+2:]
		if end := slices.IndexFunc(args, func(w string) bool { return w == "&&" || w == ";" || w == "||" || w == "|" }); end >= 0 {
			args = args[:end]
		}
		if !slices.Contains(args, "./cmd/admitter") && !slices.Contains(args, "github.com/admitter/admitter/cmd/admitter") {
			continue
		}
		for j, a := range args {
			if a == "-o" && j+1 < len(args) {
				output = args[j+1]
			} else if v, ok := strings.CutPrefix(a, "-o="); ok {
				output = v
			}
		}
		for j := i - 1; j >= 0 && strings.Contains(words[j], "=") && !strings.HasPrefix(words[j], "-"); j-- {
			if words[j] == "CGO_ENABLED=0" {
				cgoOff = true
			}
		}
		return true, output, cgoOff
	}
	return false, "", false
}

// checkDockerfile: a golang stage of go.mod's Go version builds ./cmd/admitter without cgo; the
// image is the last stage, which copies that binary from it and runs it as PID 1 (exec-form
// ENTRYPOINT: it receives SIGTERM and settles its jobs) as a user other than root.
func checkDockerfile(s *stack) []string {
	d, problems := parseDockerfile(s)
	if d == nil {
		return problems
	}
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	goVer, err := goVersion()
	if err != nil {
		return append(problems, err.Error())
	}
	build, binary := -1, ""
	for i, st := range d.stages {
		ref, err := d.image(st)
		if err != nil {
			add("%s: FROM %s: %v", d.at(st.Location), st.BaseName, err)
			continue
		}
		if ref == nil || reference.FamiliarName(ref) != "golang" {
			continue
		}
		if t, ok := ref.(reference.Tagged); !ok || t.Tag() != goVer && !strings.HasPrefix(t.Tag(), goVer+"-") && !strings.HasPrefix(t.Tag(), goVer+".") {
			add("%s: FROM %s builds with another Go than go.mod's (go %s)", d.at(st.Location), reference.FamiliarString(ref), goVer)
		}
		cgoOff := false
		for _, c := range st.Commands {
			switch c := c.(type) {
			case *instructions.EnvCommand:
				for _, kv := range c.Env {
					if kv.Key == "CGO_ENABLED" {
						cgoOff = kv.Value == "0"
					}
				}
			case *instructions.RunCommand:
				words := c.CmdLine
				if c.PrependShell {
					words, err = shell.NewLex('\\').ProcessWords(strings.Join(c.CmdLine, " "), shell.EnvsFromSlice(nil))
					if err != nil {
						add("%s: %v", d.at(c.Location()), err)
						continue
					}
				}
				found, out, off := findGoBuild(words)
				if !found {
					continue
				}
				build = i
				if !cgoOff && !off {
					add("%s: go build without CGO_ENABLED=0: the binary would need the build image's libc, which the run stage does not have", d.at(c.Location()))
				}
				if binary = out; binary == "" {
					add("%s: go build without -o: where does the binary go?", d.at(c.Location()))
				}
			}
		}
	}
	if build < 0 {
		return append(problems, fmt.Sprintf("%s: no golang stage runs `go build ... ./cmd/admitter`", rel(d.file)))
	}

	// The image: the last stage.
	last := d.stages[len(d.stages)-1]
	installed := ""
	var entry *instructions.EntrypointCommand
	for _, c := range last.Commands {
		switch c := c.(type) {
		case *instructions.CopyCommand:
			if c.From != d.stages[build].Name && c.From != strconv.Itoa(build) || binary == "" || !slices.ContainsFunc(c.SourcePaths, func(p string) bool { return path.Clean(p) == path.Clean(binary) }) {
				continue
			}
			installed = c.DestPath
			if strings.HasSuffix(installed, "/") {
				installed = path.Join(installed, path.Base(binary))
			}
		case *instructions.EntrypointCommand:
			entry = c
		}
	}
	from := d.stages[build].Name
	if from == "" {
		from = strconv.Itoa(build)
	}
	switch {
	case binary == "": // reported above
	case installed == "":
		add("%s: the last stage (the image) does not COPY --from=%s %s, the binary built", d.at(last.Location), from, binary)
	case entry == nil:
		add("%s: the last stage (the image) has no ENTRYPOINT", d.at(last.Location))
	case entry.PrependShell:
		add("%s: ENTRYPOINT in shell form: use the exec form, [%q], so that admitter is PID 1 and receives SIGTERM", d.at(entry.Location()), installed)
	case len(entry.CmdLine) == 0 || path.Clean(entry.CmdLine[0]) != path.Clean(installed):
		add("%s: ENTRYPOINT %q does not run the binary copied to %s", d.at(entry.Location()), entry.CmdLine, installed)
	}
	user, userAt := d.user()
	name, _, _ := strings.Cut(user, ":")
	ref, _ := d.image(last)
	switch {
	case user == "" && (ref == nil || !strings.Contains(reference.FamiliarString(ref), "nonroot")):
		add("%s: the last stage sets no USER (and its base is not a nonroot image): admitter would run as root", d.at(last.Location))
	case name == "root" || name == "0":
		add("%s: USER %s is root", userAt, user)
	}
	return problems
}

// checkDockerignore: the build context leaves out .git but keeps every file `go build
// ./cmd/admitter` reads, and every file the Dockerfile copies from it.
func checkDockerignore(s *stack) []string {
	d, problems := parseDockerfile(s)
	if d == nil {
		return problems
	}
	ignoreFile := d.file + ".dockerignore" // takes precedence, as in BuildKit
	data, err := s.read(ignoreFile)
	if os.IsNotExist(err) {
		ignoreFile = filepath.Join(d.context, ".dockerignore")
		data, err = s.read(ignoreFile)
	}
	if err != nil {
		return append(problems, fmt.Sprintf("%v (without a .dockerignore the whole repository, .git included, is sent to the builder)", err))
	}
	patterns, err := ignorefile.ReadAll(bytes.NewReader(data))
	if err != nil {
		return append(problems, fmt.Sprintf("%s: %v", rel(ignoreFile), err))
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return append(problems, fmt.Sprintf("%s: %v", rel(ignoreFile), err))
	}
	excluded := func(file string) bool {
		ex, err := pm.MatchesOrParentMatches(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", rel(ignoreFile), err))
		}
		return ex
	}
	files, err := buildFiles()
	if err != nil {
		return append(problems, err.Error())
	}
	for _, f := range files {
		if excluded(f) {
			problems = append(problems, fmt.Sprintf("%s leaves out %s, which `go build ./cmd/admitter` reads", rel(ignoreFile), f))
		}
	}
	if !excluded(".git/HEAD") {
		problems = append(problems, fmt.Sprintf("%s does not leave out .git", rel(ignoreFile)))
	}
	for _, st := range d.stages {
		for _, c := range st.Commands {
			var srcs []string
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From == "" {
					srcs = c.SourcePaths
				}
			case *instructions.AddCommand:
				srcs = c.SourcePaths
			}
			for _, src := range srcs {
				if src == "." || strings.ContainsAny(src, "*?[") || strings.Contains(src, "://") {
					continue
				}
				clean := path.Clean(strings.TrimPrefix(src, "/"))
				if _, err := os.Stat(filepath.Join(d.context, filepath.FromSlash(clean))); err != nil {
					problems = append(problems, fmt.Sprintf("%s: %s %s: not in the build context", d.at(c.Location()), strings.ToUpper(c.Name()), src))
				} else if excluded(clean) {
					problems = append(problems, fmt.Sprintf("%s: %s %s, which %s leaves out", d.at(c.Location()), strings.ToUpper(c.Name()), src, rel(ignoreFile)))
				}
			}
		}
	}
	return problems
}

func TestDockerfile(t *testing.T)   { report(t, checkDockerfile) }
func TestDockerignore(t *testing.T) { report(t, checkDockerignore) }

func TestDockerChecksCatch(t *testing.T) {
	t.Run("dockerfile", func(t *testing.T) {
		catches(t, "Dockerfile", checkDockerfile, []breakage{
			{"golang:1.26-bookworm", "golang:1.25-bookworm", "Dockerfile:{line}: FROM golang:1.25-bookworm builds with another Go than go.mod's (go 1.26)"},
			{"RUN --mount=type=cache,target=/go/pkg/mod \\\n    --mount=type=cache,target=/root/.cache/go-build \\\n    CGO_ENABLED=0 GOOS",
				"RUN --mount=type=cache,target=/go/pkg/mod \\\n    --mount=type=cache,target=/root/.cache/go-build \\\n    GOOS", "Dockerfile:{line}: go build without CGO_ENABLED=0"},
			{"RUN --mount=type=cache,target=/go/pkg/mod \\\n    --mount=type=cache,target=/root/.cache/go-build \\\n    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \\\n    go build -trimpath -ldflags=\"-s -w\" -o /admitter ./cmd/admitter",
				"RUN --mount=type=cache,target=/go/pkg/mod \\\n    --mount=type=cache,target=/root/.cache/go-build \\\n    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \\\n    go build -trimpath -ldflags=\"-s -w\" ./cmd/admitter", "Dockerfile:{line}: go build without -o"},
			{"./cmd/admitter", "./cmd/admitter-bench", "Dockerfile: no golang stage runs `go build ... ./cmd/admitter`"},
			{"FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /admitter /admitter", "FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /src/go.mod /go.mod", "Dockerfile:{line}: the last stage (the image) does not COPY --from=build /admitter"},
			{`ENTRYPOINT ["/admitter"]`, "ENTRYPOINT /admitter", `Dockerfile:{line}: ENTRYPOINT in shell form`},
			{`ENTRYPOINT ["/admitter"]`, `ENTRYPOINT ["/usr/local/bin/admitter"]`, `Dockerfile:{line}: ENTRYPOINT ["/usr/local/bin/admitter"] does not run the binary copied to /admitter`},
			{"USER 65532:65532", "USER root", "Dockerfile:{line}: USER root is root"},
			{"USER 65532:65532", "USER 0:0", "Dockerfile:{line}: USER 0:0 is root"},
			{"AS build", "as build", "Dockerfile:{line}: 'as' and 'FROM' keywords' casing do not match (BuildKit lint rule FromAsCasing)"},
			{":nonroot\nCOPY --from=build /admitter /admitter\n# nonroot (65532), numeric so that Kubernetes' runAsNonRoot can verify it.\nUSER 65532:65532\n",
				"\nCOPY --from=build /admitter /admitter\n", "Dockerfile:{line}: the last stage sets no USER"},
			{"FROM --platform=$BUILDPLATFORM golang", "FROM --platform=$BUILDPLATFORM golang\nFROOM", "Dockerfile: dockerfile parse error on line 7: unknown instruction: FROOM"},
		})
	})
	t.Run("dockerignore", func(t *testing.T) {
		catches(t, ".dockerignore", checkDockerignore, []breakage{
			{"\ncompose.yaml\n", "\ncompose.yaml\nlua\n", ".dockerignore leaves out lua/admit.lua, which `go build ./cmd/admitter` reads"},
			{"\ncompose.yaml\n", "\ncompose.yaml\n**/*.yaml\n", ".dockerignore leaves out cmd/admitter/example-plans.yaml, which `go build ./cmd/admitter` reads"},
			{"\ncompose.yaml\n", "\ncompose.yaml\ngo.sum\n", ": COPY go.sum, which .dockerignore leaves out"},
			{"\n.git\n", "\n", ".dockerignore does not leave out .git"},
		})
		catches(t, "Dockerfile", checkDockerignore, []breakage{
			{"COPY go.mod go.sum ./", "COPY go.mod go.work ./", "Dockerfile:{line}: COPY go.work: not in the build context"},
		})
	})
}
