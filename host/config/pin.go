package config

// The pin edit of `ffscan plugins pin --write`: one key changed in an
// operator's YAML file without reformatting it.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WritePin sets scanners.NAME.sha256 in a YAML file by a targeted text
// edit, so comments and layout stay; the result is loaded and checked
// before it replaces the file (atomically, same mode).
func WritePin(path, name, sha string) error {
	body, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := setPin(body, name, sha)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".pin-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), fi.Mode().Perm()); err != nil {
		return err
	}
	cfg, err := Load(Sources{File: tmp.Name(), Environ: []string{}})
	if err != nil {
		return fmt.Errorf("the edited file would not load, left %s unchanged: %w", path, err)
	}
	if got := cfg.Scanners[name].SHA256; got != sha {
		return fmt.Errorf("the edit did not take (scanners.%s.sha256 reads %q), left %s unchanged", name, got, path)
	}
	return os.Rename(tmp.Name(), path)
}

// setPin edits the YAML text: scanners.NAME in block style gets its
// sha256 line replaced or added; in flow style ({...}) the key is replaced
// or added inside the braces. A scanner that is not in the file is an
// error: adding it would enable it.
func setPin(body []byte, name, sha string) ([]byte, error) {
	lines := strings.Split(string(body), "\n")
	scanners := -1
	for i, l := range lines {
		if indent(l) == 0 && !blank(l) {
			if rest, ok := yamlKey(l, "scanners"); ok && (rest == "" || strings.HasPrefix(rest, "#")) {
				scanners = i
				break
			}
		}
	}
	if scanners < 0 {
		return nil, fmt.Errorf("no block-style scanners: section; add scanners.%s.sha256: %q yourself", name, sha)
	}
	pinLine := "sha256: \"" + sha + "\""
	for i := scanners + 1; i < len(lines); i++ {
		l := lines[i]
		if blank(l) {
			continue
		}
		if indent(l) == 0 {
			break
		}
		rest, ok := yamlKey(l, name)
		if !ok {
			continue
		}
		var out []string
		switch {
		case strings.HasPrefix(rest, "{"):
			line, ok := pinFlow(l, pinLine)
			if !ok {
				return nil, fmt.Errorf("scanners.%s spans several lines in flow style; add sha256: %q yourself", name, sha)
			}
			out = slices.Concat(lines[:i], []string{line}, lines[i+1:])
		case rest != "" && !strings.HasPrefix(rest, "#"):
			return nil, fmt.Errorf("scanners.%s is not a mapping this tool can edit; add sha256: %q yourself", name, sha)
		default:
			out = pinBlock(lines, i, pinLine)
		}
		return []byte(strings.Join(out, "\n")), nil
	}
	return nil, fmt.Errorf("scanners.%s is not in the file (adding it would enable it); add it, then pin", name)
}

// indent is a line's indentation.
func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// blank reports an empty or comment line.
func blank(l string) bool { t := strings.TrimSpace(l); return t == "" || strings.HasPrefix(t, "#") }

// yamlKey reports whether line l holds key k (bare or quoted), and what
// follows its colon.
func yamlKey(l, k string) (rest string, ok bool) {
	t := strings.TrimLeft(l, " ")
	for _, q := range []string{k, `"` + k + `"`, "'" + k + "'"} {
		if strings.HasPrefix(t, q+":") {
			return strings.TrimSpace(t[len(q)+1:]), true
		}
	}
	return "", false
}

// pinFlow sets the pin inside a flow mapping on one line ({...}); false
// when the mapping does not close on it.
func pinFlow(l, pinLine string) (string, bool) {
	end := strings.LastIndex(l, "}")
	if end < 0 {
		return "", false
	}
	open := strings.Index(l, "{")
	inner := l[open+1 : end]
	parts := splitFlow(inner)
	replaced := false
	for j, p := range parts {
		if k, _, _ := strings.Cut(strings.TrimSpace(p), ":"); strings.Trim(k, `"'`) == "sha256" {
			parts[j] = " " + pinLine
			replaced = true
		}
	}
	if !replaced {
		parts = append([]string{pinLine}, parts...)
		if strings.TrimSpace(inner) == "" {
			parts = parts[:1]
		}
	}
	for j := range parts {
		parts[j] = strings.TrimSpace(parts[j])
	}
	return l[:open+1] + strings.Join(parts, ", ") + l[end:], true
}

// pinBlock sets the pin of the block mapping that starts at lines[i]:
// its sha256 line replaced, or one added as its first key.
func pinBlock(lines []string, i int, pinLine string) []string {
	ni := indent(lines[i])
	// The block's keys sit at the indent of its first line; deeper lines
	// belong to nested mappings (options:) and say nothing about where
	// the pin goes.
	child := -1
	for j := i + 1; j < len(lines); j++ {
		c := lines[j]
		if blank(c) {
			continue
		}
		if indent(c) <= ni {
			break
		}
		if child < 0 {
			child = indent(c)
		}
		if _, ok := yamlKey(c, "sha256"); ok && indent(c) == child {
			out := slices.Clone(lines)
			out[j] = strings.Repeat(" ", child) + pinLine
			return out
		}
	}
	if child < 0 {
		child = ni + 2
	}
	return slices.Concat(lines[:i+1], []string{strings.Repeat(" ", child) + pinLine}, lines[i+1:])
}

// splitFlow splits a flow mapping's inside at top-level commas.
func splitFlow(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '"' || ch == '\'':
			quote = ch
		case ch == '{' || ch == '[':
			depth++
		case ch == '}' || ch == ']':
			depth--
		case ch == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if strings.TrimSpace(s[start:]) != "" || len(out) > 0 {
		out = append(out, s[start:])
	}
	return out
}
