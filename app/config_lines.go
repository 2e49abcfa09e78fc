package app

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// configLines is where each field of a config file is, by its path as errors name it
// ("sinks.aggregates.salt_buckets"): the line of its key.
type configLines map[string]int

// fileFields walks the YAML text b against Config's fields: it returns the line of every field
// written, and an error for every key that is no field, each with its line and the field it was
// probably meant to be. The decoder reports only the first unknown key; a file with three typos
// should not take three runs to mend.
func fileFields(b []byte) (configLines, []error) {
	lines := configLines{}
	var f *ast.File
	func() {
		defer func() { _ = recover() }() // the decoder's own error says what is wrong then
		f, _ = parser.ParseBytes(b, 0)
	}()
	if f == nil {
		return lines, nil
	}
	var errs []error
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			walkFields(doc.Body, reflect.TypeOf(Config{}), "", lines, &errs)
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return lineOf(errs[i]) < lineOf(errs[j]) })
	return lines, errs
}

// walkFields records the fields of the mapping n, read into a value of type t, under path.
func walkFields(n ast.Node, t reflect.Type, path string, lines configLines, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return // a scalar, a list or a map of the user's own keys (topics.names)
	}
	if _, custom := reflect.PointerTo(t).MethodByName("UnmarshalYAML"); custom {
		return
	}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		return // not a mapping: the decoder says what is wrong with it
	}
	fields := yamlFields(t)
	for _, mv := range values {
		if mv.Key == nil || mv.Key.GetToken() == nil {
			continue
		}
		key, line := mv.Key.GetToken().Value, mv.Key.GetToken().Position.Line
		name := key
		if path != "" {
			name = path + "." + key
		}
		ft, ok := fields[key]
		if !ok {
			msg := fmt.Sprintf("line %d: %s: unknown field", line, name)
			if near := nearest(key, keys(fields)); near != "" {
				msg += " (did you mean " + near + "?)"
			}
			*errs = append(*errs, errors.New(msg))
			continue
		}
		lines[name] = line
		if mv.Value == nil {
			continue
		}
		if isLeaf(ft) {
			// Each value decoded alone: the decoder stops at the first that does not fit its
			// field, and a file with three should not take three runs to mend.
			if err := decodeLeaf(mv.Value, ft); err != nil {
				*errs = append(*errs, fmt.Errorf("line %d: %s: %s", line, name, leafError(err, ft, mv.Value)))
			}
			continue
		}
		walkFields(mv.Value, ft, name, lines, errs)
	}
}

// yamlFields is the fields of struct type t by their YAML names.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// nearest is the name among names at most three edits from s (the closest; the first of equals),
// or "".
func nearest(s string, names []string) string {
	best, dist := "", min(4, len(s))
	for _, n := range names {
		if d := editDistance(s, n); d < dist {
			best, dist = n, d
		}
	}
	return best
}

var lineRe = regexp.MustCompile(`(?m)^line (\d+):`)

// lineOf is the line an error of fileFields names, for sorting.
func lineOf(err error) int {
	var n int
	if m := lineRe.FindStringSubmatch(err.Error()); m != nil {
		fmt.Sscan(m[1], &n)
	}
	return n
}

// at prefixes each of Validate's errors (field: what is wrong) with the file and line of its
// field, when the file sets it: "abacus.yaml:12: sinks.aggregates.salt_buckets: 300 is outside
// 1..256".
func (l configLines) at(file string, err error) string {
	var out []string
	for _, msg := range strings.Split(err.Error(), "\n") {
		field, _, _ := strings.Cut(msg, ": ")
		if i := strings.IndexByte(field, '['); i >= 0 {
			field = field[:i] // kafka.brokers[0]: the list's line
		}
		if n, ok := l[field]; ok && !strings.ContainsAny(field, " ") {
			msg = fmt.Sprintf("%s:%d: %s", file, n, msg)
		}
		out = append(out, msg)
	}
	return strings.Join(out, "\n")
}

// unknownFields are the keys of a file that are no field and the values that do not fit theirs,
// every one of them.
type unknownFields []error

func (u unknownFields) Error() string { return errors.Join(u...).Error() }

// in words the errors for the file at path: "path:12: kafka.brokerz: unknown field (...)".
func (u unknownFields) in(path string) string {
	return lineRe.ReplaceAllStringFunc(u.Error(), func(m string) string { return path + ":" + m[5:] })
}

// isLeaf says whether a field of type t is decoded as one value (a scalar, a list, a map, or a
// type that decodes itself) rather than walked key by key.
func isLeaf(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if _, custom := reflect.PointerTo(t).MethodByName("UnmarshalYAML"); custom {
		return true
	}
	return t.Kind() != reflect.Struct
}

// leafError is a decode error of value v of a field of type t, in words rather than Go type
// names, without the decoder's position and quoted lines: the caller says where.
func leafError(err error, t reflect.Type, v ast.Node) string {
	msg := err.Error()
	if strings.Contains(msg, "cannot unmarshal") {
		got := ""
		switch v.(type) {
		case *ast.SequenceNode:
			got = "a list "
		case *ast.MappingNode, *ast.MappingValueNode:
			got = "a mapping "
		default:
			if tk := v.GetToken(); tk != nil {
				got = fmt.Sprintf("%q ", tk.Value)
			}
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return got + "is not a whole number"
		case reflect.Float32, reflect.Float64:
			return got + "is not a number"
		case reflect.Bool:
			return got + "is not true or false"
		case reflect.Slice:
			return got + "is not a list ([a, b] or one item a line under -)"
		case reflect.Map:
			return got + "is not a mapping ({key: value})"
		case reflect.String:
			return got + "is not text"
		}
	}
	if i := strings.Index(msg, "\n"); i >= 0 {
		msg = msg[:i]
	}
	if strings.HasPrefix(msg, "[") {
		if i := strings.Index(msg, "] "); i >= 0 {
			msg = msg[i+2:]
		}
	}
	return msg
}

// decodeLeaf decodes v into a value of type t, the decoder's panics turned into errors (it
// dereferences nil on some tags without values; see unmarshalYAML).
func decodeLeaf(v ast.Node, t reflect.Type) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("could not be read (%v): look for a tag (!...) or a construct the decoder does not take", p)
		}
	}()
	return yaml.NodeToValue(v, reflect.New(t).Interface())
}
