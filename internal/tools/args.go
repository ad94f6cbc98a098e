package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// decodeArgs strictly decodes a JSON arguments object into dst, a pointer
// to a struct whose exported fields carry json tags. Empty or null
// arguments decode as {}. Keys must match a tag exactly (no
// case-insensitive matching), values must have the declared type, and the
// object must be the only JSON value. Errors describe the first problem in
// words a model can act on.
func decodeArgs(raw json.RawMessage, dst any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("arguments must be a JSON object, got %s", te.Value)
		}
		return fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	known := jsonFieldNames(dst)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := known[k]; !ok {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("unknown argument %q (allowed: %s)", k, strings.Join(names, ", "))
		}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("argument %q must be %s, got %s", te.Field, jsonTypeName(te.Type), te.Value)
		}
		return fmt.Errorf("arguments are not valid: %v", err)
	}
	return nil
}

// jsonFieldNames returns the json names of the fields of the struct dst
// points to.
func jsonFieldNames(dst any) map[string]struct{} {
	t := reflect.TypeOf(dst).Elem()
	out := make(map[string]struct{}, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = struct{}{}
		}
	}
	return out
}

// jsonTypeName describes a Go type as the JSON value it accepts.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// requireString checks that a required string argument is present.
func requireString(name string, v *string) error {
	if v == nil {
		return fmt.Errorf("missing required argument %q", name)
	}
	return nil
}

// invalidArgs is the error result for arguments that failed to decode or
// validate.
func invalidArgs(tool string, err error) Result {
	return ErrorResult(fmt.Sprintf("Invalid arguments for %s: %v", tool, err))
}
