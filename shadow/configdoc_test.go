package shadow

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// configDoc is the configuration reference, relative to this package.
const configDoc = "../docs/configuration.md"

// docSection returns the lines of the "## title" section of a Markdown
// document, up to the next section of that level.
func docSection(t *testing.T, doc, title string) []string {
	t.Helper()
	var lines []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = line == "## "+title
			continue
		}
		if in {
			lines = append(lines, line)
		}
	}
	if !in {
		t.Fatalf("%s has no section %q", configDoc, "## "+title)
	}
	return lines
}

// tableCells returns the body rows of the table in lines whose header row
// is header, each split into its cells.
func tableCells(t *testing.T, lines []string, header string) [][]string {
	t.Helper()
	var rows [][]string
	found := false
	for i, line := range lines {
		if line != header {
			continue
		}
		found = true
		for _, row := range lines[i+1:] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			if strings.HasPrefix(row, "| ---") {
				continue
			}
			cells := strings.Split(strings.Trim(row, "|"), " | ")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, cells)
		}
		break
	}
	if !found || len(rows) == 0 {
		t.Fatalf("%s: no table with the header %q", configDoc, header)
	}
	return rows
}

var backticked = regexp.MustCompile("`([^`]*)`")

// TestConfigKeysDocumented: the reference's table of the file's keys
// (docs/configuration.md, "## /etc/claude-sandbox.conf", a row a key, the
// key in backticks in its first cell) holds every key of configKeys and no
// other, each once; and the keys its environment-override table names are
// keys of the table.
func TestConfigKeysDocumented(t *testing.T) {
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	inTable := map[string]bool{}
	for _, k := range configKeys {
		inTable[k.name] = true
	}

	documented := map[string]bool{}
	for _, row := range tableCells(t, docSection(t, doc, "/etc/claude-sandbox.conf"), "| key | value | default | meaning |") {
		m := backticked.FindStringSubmatch(row[0])
		if m == nil || m[0] != row[0] {
			t.Errorf("%s: the key cell %q is not one key in backticks", configDoc, row[0])
			continue
		}
		key := m[1]
		if documented[key] {
			t.Errorf("%s documents the key %s twice", configDoc, key)
		}
		documented[key] = true
		if !inTable[key] {
			t.Errorf("%s documents the key %s, which the file does not take (not in configKeys)", configDoc, key)
		}
	}
	for _, k := range configKeys {
		if !documented[k.name] {
			t.Errorf("the key %s (configKeys) is missing from the table in %s", k.name, configDoc)
		}
	}

	for _, row := range tableCells(t, docSection(t, doc, "Environment overrides"), "| variable | overrides | notes |") {
		if len(row) < 2 {
			t.Errorf("%s: environment override row %q has no overrides cell", configDoc, row)
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(row[1], -1) {
			if !inTable[m[1]] {
				t.Errorf("%s: %s overrides the key %s, which the file does not take (not in configKeys)", configDoc, row[0], m[1])
			}
		}
	}
}
