package main

import (
	"os"
	"strings"
	"testing"
)

// TestUpgradingGivesTheMappingTheStartLogs: docs/upgrading.md's mapping line is, character for
// character, the one a replica given ADMITTER_PARTITIONS=4 and the default subjects logs at start
// (config.partitions().MappingLine()), which check-config prints too: a change of the subjects'
// mapping fails here, not on an operator's server. Before, the page gave a template without the input's literal tokens
// ("jobs.submit."), which would have stored every job on a subject no partition reads.
func TestUpgradingGivesTheMappingTheStartLogs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/upgrading.md")
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(map[string]string{"ADMITTER_PARTITIONS": "4"})
	if err != nil {
		t.Fatal(err)
	}
	want := c.partitions().MappingLine()
	if want == "" || !strings.Contains(want, "jobs.submit.{{wildcard(1)}}") {
		t.Fatalf("the mapping for 4 partitions is %q", want)
	}
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/upgrading.md does not give the mapping line the start logs:\n%s", want)
	}
	if !strings.Contains(c.describe(), "ADMITTER_PARTITIONS=4 (every NATS server needs "+want+")") {
		t.Errorf("check-config does not print the mapping line:\n%s", c.describe())
	}
}
