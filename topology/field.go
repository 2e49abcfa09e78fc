package topology

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// fieldIndex finds a struct field of E by Go name or json tag, so that an aggregation named by
// field fails at Build time, naming the field, rather than at the first event.
func fieldIndex[E any](field string) (reflect.StructField, bool, error) {
	t := reflect.TypeFor[E]()
	ptr := false
	if t.Kind() == reflect.Pointer {
		t, ptr = t.Elem(), true
	}
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false, fmt.Errorf("field %q: event type %v is not a struct (use the ...Of form with a func)", field, t)
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Name == field || tag == field {
			return f, ptr, nil
		}
	}
	return reflect.StructField{}, false, fmt.Errorf("unknown field %q: %v has no such field or json tag", field, t)
}

func fieldValue(e any, f reflect.StructField, ptr bool) reflect.Value {
	v := reflect.ValueOf(e)
	if ptr {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v.FieldByIndex(f.Index)
}

// numericField returns a reader of a numeric field of E as float64.
func numericField[E any](field string) (func(E) float64, error) {
	f, ptr, err := fieldIndex[E](field)
	if err != nil {
		return nil, err
	}
	switch f.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(e E) float64 {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return float64(v.Int())
			}
			return 0
		}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return func(e E) float64 {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return float64(v.Uint())
			}
			return 0
		}, nil
	case reflect.Float32, reflect.Float64:
		return func(e E) float64 {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return v.Float()
			}
			return 0
		}, nil
	}
	return nil, fmt.Errorf("field %q has type %v, not a number", field, f.Type)
}

// keyField returns a reader of a string, integer or []byte field of E as bytes (distinct counts).
func keyField[E any](field string) (func(E) []byte, error) {
	f, ptr, err := fieldIndex[E](field)
	if err != nil {
		return nil, err
	}
	switch k := f.Type.Kind(); {
	case k == reflect.String:
		return func(e E) []byte {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return []byte(v.String())
			}
			return nil
		}, nil
	case k >= reflect.Int && k <= reflect.Int64:
		return func(e E) []byte {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return strconv.AppendInt(nil, v.Int(), 10)
			}
			return nil
		}, nil
	case k >= reflect.Uint && k <= reflect.Uint64:
		return func(e E) []byte {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return strconv.AppendUint(nil, v.Uint(), 10)
			}
			return nil
		}, nil
	case k == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8:
		return func(e E) []byte {
			if v := fieldValue(e, f, ptr); v.IsValid() {
				return v.Bytes()
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("field %q has type %v: distinct needs a string, integer or []byte", field, f.Type)
}
