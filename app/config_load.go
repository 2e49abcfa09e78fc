package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// MaxConfigBytes bounds a config file: a path naming a device or a log by mistake fails at once.
const MaxConfigBytes = 1 << 20

// LoadConfig reads a YAML file; unknown fields are errors, so a typo never goes unnoticed.
// ${NAME} is replaced by the environment variable NAME (an unset one is an error), so one file
// can serve several environments; a $ not followed by { is left alone. An error never shows a
// password, neither one written in the file nor one expanded from ${NAME}.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("config %s: over %d bytes (app.MaxConfigBytes)", path, MaxConfigBytes)
	}
	c, err := ParseConfig(b, os.LookupEnv)
	var unknown unknownFields
	if errors.As(err, &unknown) {
		return nil, fmt.Errorf("config %s is not valid:\n  %s", path, strings.ReplaceAll(unknown.in(path), "\n", "\n  "))
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.file = path
	return c, nil
}

// ParseConfig reads a config from YAML text, replacing ${NAME} with lookup(NAME) first, as
// LoadConfig does with the environment.
func ParseConfig(b []byte, lookup func(string) (string, bool)) (*Config, error) {
	b, err := expandEnv(b, lookup)
	if err != nil {
		return nil, err
	}
	lines, unknown := fileFields(b)
	if len(unknown) > 0 {
		for i, err := range unknown { // a value that does not fit may be a password
			unknown[i] = errors.New(redactSecrets(err.Error(), b))
		}
		return nil, unknownFields(unknown)
	}
	var c Config
	c.lines = lines
	if err := unmarshalYAML(b, &c); err != nil {
		// The formatted error quotes the lines around the mistake, after expansion: passwords
		// there (written or expanded) are taken out.
		msg := yaml.FormatError(err, false, true)
		if multilineSecret(b) {
			msg = yaml.FormatError(err, false, false) // its lines could not be told apart
		}
		return nil, errors.New(redactSecrets(msg, b))
	}
	return &c, nil
}

// unmarshalYAML is yaml.UnmarshalWithOptions with unknown fields refused, and with a panic of
// the decoder turned into an error: goccy/go-yaml v1.19.2 dereferences nil on a tag without a
// value on a list field (`brokers: !`, goccy/go-yaml issue 735, fixed upstream after that
// release), and a config mistake must never crash the command.
func unmarshalYAML(b []byte, c *Config) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the YAML decoder failed on this file (%v): look for a tag (!...) or a construct it does not take", p)
		}
	}()
	return yaml.UnmarshalWithOptions(b, c, yaml.DisallowUnknownField())
}

// secretKey finds the values of password keys in YAML text, in block (password: x) and flow
// ({password: x}) style, quoted or not: the fallback when the text does not parse, and the way
// the quoted lines of an error are found.
var secretKey = regexp.MustCompile(`(?m)(^|[\s{,])password\s*:[ \t]*("(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*'|[^,}#\n]*)`)

// minScrubbed is the shortest password value taken out of an error's text wherever it appears;
// shorter ones are only taken out of the lines that quote a password key, so that a one-letter
// password does not blank out every such letter of the message.
const minScrubbed = 4

// redactSecrets removes from msg every password value of the YAML text b (as parsed, and as the
// regular expression finds them), and the rest of every line of msg that quotes a password key.
func redactSecrets(msg string, b []byte) string {
	var values []string
	func() {
		defer func() { _ = recover() }() // the regular expression below still finds them
		if f, err := parser.ParseBytes(b, 0); err == nil {
			for _, doc := range f.Docs {
				if doc != nil {
					ast.Walk(passwordFinder{&values}, doc)
				}
			}
		}
	}()
	for _, m := range secretKey.FindAllSubmatch(b, -1) {
		v := strings.TrimSpace(string(m[2]))
		values = append(values, v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			values = append(values, v[1:len(v)-1])
		}
	}
	// Longest first, so that a value containing another is taken out whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	for _, v := range values {
		if len(v) >= minScrubbed {
			msg = strings.ReplaceAll(msg, v, kafkasec.Secret(v).String())
		}
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if loc := secretKey.FindStringSubmatchIndex(l); loc != nil && loc[5] > loc[4] {
			lines[i] = l[:loc[4]] + kafkasec.Secret("x").String()
		}
	}
	return strings.Join(lines, "\n")
}

// multilineSecret reports whether a password value of b may continue past its key's line (a block
// scalar, an anchor or alias, a quote left open, a value on the next line): the lines of an error
// that quote such a value are not told apart by redactSecrets, so the error quotes no lines.
func multilineSecret(b []byte) bool {
	for _, m := range secretKey.FindAllSubmatch(b, -1) {
		v := strings.TrimSpace(string(m[2]))
		if v == "" || strings.ContainsAny(v[:1], "|>&*!") {
			return true
		}
		if (v[0] == '"' || v[0] == '\'') && (len(v) < 2 || v[len(v)-1] != v[0]) {
			return true
		}
	}
	return false
}

// passwordFinder collects the values of every mapping key named password.
type passwordFinder struct{ values *[]string }

// Visit implements ast.Visitor.
func (f passwordFinder) Visit(n ast.Node) ast.Visitor {
	mv, ok := n.(*ast.MappingValueNode)
	if !ok || mv.Key == nil || mv.Value == nil {
		return f
	}
	if k := mv.Key.GetToken(); k == nil || k.Value != "password" {
		return f
	}
	switch v := mv.Value.(type) {
	case *ast.StringNode:
		*f.values = append(*f.values, v.Value)
	case *ast.LiteralNode:
		if v.Value != nil {
			*f.values = append(*f.values, v.Value.Value, strings.TrimRight(v.Value.Value, "\n"))
		}
	default:
		if tk := v.GetToken(); tk != nil {
			*f.values = append(*f.values, tk.Value)
		}
	}
	return f
}

// expandEnv replaces ${NAME} outside comment lines.
func expandEnv(b []byte, lookup func(string) (string, bool)) ([]byte, error) {
	lines := bytes.SplitAfter(b, []byte("\n"))
	var out []byte
	for n, line := range lines {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			out = append(out, line...)
			continue
		}
		for {
			i := bytes.Index(line, []byte("${"))
			if i < 0 {
				out = append(out, line...)
				break
			}
			j := bytes.IndexByte(line[i:], '}')
			if j < 0 {
				return nil, fmt.Errorf("line %d: unterminated ${", n+1)
			}
			name := string(line[i+2 : i+j])
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("line %d: ${%s}: environment variable %s is not set", n+1, name, name)
			}
			out = append(append(out, line[:i]...), v...)
			line = line[i+j+1:]
		}
	}
	return out, nil
}
