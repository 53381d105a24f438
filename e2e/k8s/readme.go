package k8s

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A procedure of README.md, read at test time so that the real node runs
// what the README says, as written: a README edit that breaks a procedure
// fails the test that runs it.

// Step is one numbered step of a README procedure.
type Step struct {
	N    int
	Text string // the step's text, fenced blocks included
	// Cmds are the step's commands, in order: every line of its ```sh
	// blocks that is not a comment (a trailing backslash joins the next
	// line), then every inline code span outside parentheses whose first
	// word is one of operatorTools. Commented lines ("# or: ...", "# a
	// private registry: ...") are alternatives, not steps: they are in
	// Alternatives.
	Cmds []string
	// Alternatives are the commented lines of the step's ```sh blocks,
	// without the leading "# " (e.g. "or: mkdir image && ...").
	Alternatives []string
}

// operatorTools are the programs whose inline code spans are commands (an
// inline span naming a path or a value is prose).
var operatorTools = map[string]bool{
	"sha256sum": true, "skopeo": true, "crane": true, "kubectl": true, "helm": true,
	"rm": true, "rmdir": true, "find": true, "mkdir": true, "tar": true, "cp": true,
}

// ReadmeProcedure returns the numbered steps under the heading path (e.g.
// "## Quick start", "### Helm"): the first heading equal to path[0], then
// the first heading equal to path[1] after it, and so on; the steps end at
// the next heading of the last one's level or higher.
func ReadmeProcedure(readme string, path ...string) ([]Step, error) {
	lines := strings.Split(readme, "\n")
	i := 0
	level := 0
	for _, h := range path {
		found := false
		for ; i < len(lines); i++ {
			if !inFence(lines, i) && strings.TrimRight(lines[i], " ") == h {
				found = true
				level = strings.IndexFunc(h, func(r rune) bool { return r != '#' })
				i++
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("README: no heading %q (looked for %q)", h, strings.Join(path, " → "))
		}
	}
	var body []string
	fence := false
	for ; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "#") {
			if n := strings.IndexFunc(l, func(r rune) bool { return r != '#' }); n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
				break
			}
		}
		body = append(body, l)
	}
	return parseSteps(body, strings.Join(path, " → "))
}

// inFence reports whether line i is inside a fenced block.
func inFence(lines []string, i int) bool {
	in := false
	for _, l := range lines[:i] {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
		}
	}
	return in
}

var stepStart = regexp.MustCompile(`^(\d+)\. (.*)$`)

// parseSteps splits a procedure's body into its numbered steps (a step
// runs until the next line starting with "N. " at column 0 or a line at
// column 0 that is not part of a list item); steps must be numbered 1, 2,
// ... in order.
func parseSteps(body []string, where string) ([]Step, error) {
	var steps []Step
	var cur []string
	flush := func() error {
		if cur == nil {
			return nil
		}
		m := stepStart.FindStringSubmatch(cur[0])
		n, _ := strconv.Atoi(m[1])
		if n != len(steps)+1 {
			return fmt.Errorf("README %s: step %d follows step %d", where, n, len(steps))
		}
		s, err := parseStep(n, cur)
		if err != nil {
			return fmt.Errorf("README %s, step %d: %w", where, n, err)
		}
		steps = append(steps, s)
		cur = nil
		return nil
	}
	fence := false
	for _, l := range body {
		isFence := strings.HasPrefix(strings.TrimSpace(l), "```")
		switch {
		case !fence && stepStart.MatchString(l):
			if err := flush(); err != nil {
				return nil, err
			}
			cur = []string{l}
		case cur != nil && (fence || l == "" || strings.HasPrefix(l, " ")):
			cur = append(cur, l)
		default:
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if isFence {
			fence = !fence
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("README %s: no numbered steps", where)
	}
	return steps, nil
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// parseStep extracts a step's commands.
func parseStep(n int, lines []string) (Step, error) {
	s := Step{N: n, Text: strings.Join(lines, "\n")}
	var prose []string
	var fenced []string
	fence := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if i == 0 {
			t = stepStart.FindStringSubmatch(l)[2]
		}
		if strings.HasPrefix(t, "```") {
			if !fence && t != "```sh" {
				return s, fmt.Errorf("fenced block %q: only ```sh blocks are run", t)
			}
			fence = !fence
			continue
		}
		if fence {
			fenced = append(fenced, t)
			continue
		}
		prose = append(prose, t)
	}
	if fence {
		return s, fmt.Errorf("unterminated fenced block")
	}
	join := ""
	for _, l := range fenced {
		switch {
		case join != "":
			l = join + " " + l
			join = ""
		case l == "":
			continue
		case strings.HasPrefix(l, "#"):
			s.Alternatives = append(s.Alternatives, strings.TrimSpace(strings.TrimPrefix(l, "#")))
			continue
		}
		if strings.HasSuffix(l, "\\") {
			join = strings.TrimSpace(strings.TrimSuffix(l, "\\"))
			continue
		}
		s.Cmds = append(s.Cmds, l)
	}
	if join != "" {
		return s, fmt.Errorf("a continued line ends the block: %q", join)
	}
	text := strings.Join(prose, " ")
	for _, m := range inlineCode.FindAllStringSubmatchIndex(text, -1) {
		if parenDepth(text[:m[0]]) > 0 {
			continue // "(kustomize: `...`)": another way, not this procedure's
		}
		code := text[m[2]:m[3]]
		if f := strings.Fields(code); len(f) > 1 && operatorTools[f[0]] {
			s.Cmds = append(s.Cmds, code)
		}
	}
	return s, nil
}

// parenDepth is the number of parentheses open at the end of prose, outside
// code spans.
func parenDepth(prose string) int {
	d := 0
	code := false
	for _, r := range prose {
		switch {
		case r == '`':
			code = !code
		case code:
		case r == '(':
			d++
		case r == ')' && d > 0:
			d--
		}
	}
	return d
}

// placeholder matches README's V (the version) and C (the chart version)
// where they stand for a value: after a name's "-" or a tag's ":"
// (hostlease-V-image.oci.tar, REG/hostlease:V, hostlease-C.tgz), not as
// a flag (tar's -C).
var placeholder = regexp.MustCompile(`([A-Za-z0-9_./]-|:)([VC])\b`)

var registryPlaceholder = regexp.MustCompile(`\bREG\b`)

// Substitute replaces README's placeholders V, C and REG in cmd.
func Substitute(cmd, version, chartVersion, registry string) string {
	cmd = registryPlaceholder.ReplaceAllLiteralString(cmd, registry)
	return placeholder.ReplaceAllStringFunc(cmd, func(m string) string {
		v := version
		if m[len(m)-1] == 'C' {
			v = chartVersion
		}
		return m[:len(m)-1] + v
	})
}
