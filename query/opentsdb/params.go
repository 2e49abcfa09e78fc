package opentsdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Request parameters of the OpenTSDB-compatible API, which OpenTSDB reads from the query string or
// a JSON body alike.

// params merges the query string and, for POST, a JSON object body, as OpenTSDB reads its
// parameters from either.
func params(r *http.Request, limit int64) (url.Values, map[string]json.RawMessage, error) {
	q := r.URL.Query()
	if r.Method != http.MethodPost {
		return q, nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) || int64(len(b)) > limit {
		return nil, nil, &tsdbError{Code: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body over the limit of %d bytes (%s)", limit, limitMaxBodyBytes)}
	}
	if err != nil {
		return nil, nil, badRequest("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return q, nil, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, nil, badRequest("the request body is not a JSON object: %v", err)
	}
	return q, body, nil
}

// param reads a parameter from the query string or the body (strings and numbers).
func param(q url.Values, body map[string]json.RawMessage, names ...string) (string, bool, error) {
	for _, n := range names {
		if v, ok := q[n]; ok && len(v) > 0 {
			return v[0], true, nil
		}
	}
	for _, n := range names {
		raw, ok := body[n]
		if !ok || string(raw) == "null" {
			continue
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return "", false, badRequest("parameter %s: %v", n, err)
		}
		switch v := v.(type) {
		case string:
			return v, true, nil
		case json.Number:
			return v.String(), true, nil
		case bool:
			return strconv.FormatBool(v), true, nil
		}
		return "", false, badRequest("parameter %s: want a string or a number, got %s", n, raw)
	}
	return "", false, nil
}

func boolParam(q url.Values, body map[string]json.RawMessage, names ...string) (bool, error) {
	v, ok, err := param(q, body, names...)
	if err != nil || !ok {
		return false, err
	}
	if v == "" { // "?arrays" alone, as OpenTSDB's query-string flags are written
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("parameter %s: want true or false, got %q", names[0], v)
	}
	return b, nil
}

func intParam(q url.Values, body map[string]json.RawMessage, def int, names ...string) (int, error) {
	v, ok, err := param(q, body, names...)
	if err != nil || !ok || v == "" {
		return def, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, badRequest("parameter %s: want a whole number, got %q", names[0], v)
	}
	return n, nil
}
