package protocol

import (
	"fmt"
	"math"
	"regexp"
	"unicode/utf8"
)

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER.
const MaxSafeInteger = 1<<53 - 1

// D is a decoding context with a sticky first error. Decoders call its
// methods freely and check Err once at the end; after the first failure every
// method returns a zero value. A D never panics on any input.
type D struct {
	err error
	// closed, when set (by the protocol's own tests), is told of every
	// closed object that passes its key check, with the keys it allows.
	closed func(path string, v Value, required, optional []string)
}

// Err returns the first failure as a *ProtocolError with code invalid_frame.
func (d *D) Err() error { return d.err }

// Failed reports whether a failure has been recorded.
func (d *D) Failed() bool { return d.err != nil }

// Fail records a failure at path unless one is already recorded.
func (d *D) Fail(path, format string, args ...any) {
	if d.err == nil {
		d.err = &ProtocolError{Code: CodeInvalidFrame, Message: path + ": " + fmt.Sprintf(format, args...)}
	}
}

// Obj is an object being decoded.
type Obj struct {
	d    *D
	v    Value
	path string
}

// Path returns the object's location (for error messages).
func (o Obj) Path() string { return o.path }

// Raw returns the underlying object value.
func (o Obj) Raw() Value { return o.v }

// Exact requires v to be an object with exactly the listed keys.
func (d *D) Exact(v Value, path string, keys ...string) Obj {
	return d.Closed(v, path, keys, nil)
}

// Closed requires v to be an object holding every required key, any of the
// optional keys, and no other key.
func (d *D) Closed(v Value, path string, required, optional []string) Obj {
	o := Obj{d: d, v: v, path: path}
	if d.err != nil {
		return o
	}
	if v.kind != KindObject {
		d.Fail(path, "expected an object, got %s", v.kind)
		return o
	}
	for _, k := range required {
		if _, ok := v.Get(k); !ok {
			d.Fail(path, "missing key %q", k)
			return o
		}
	}
	for _, m := range v.obj {
		if !contains(required, m.Key) && !contains(optional, m.Key) {
			d.Fail(path, "unexpected key %q", m.Key)
			return o
		}
	}
	if d.closed != nil {
		d.closed(path, v, required, optional)
	}
	return o
}

// Open requires v to be an object; unknown keys are ignored.
func (d *D) Open(v Value, path string) Obj {
	o := Obj{d: d, v: v, path: path}
	if d.err == nil && v.kind != KindObject {
		d.Fail(path, "expected an object, got %s", v.kind)
	}
	return o
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Has reports whether the key is present (null counts as present).
func (o Obj) Has(key string) bool {
	_, ok := o.v.Get(key)
	return ok
}

// IsNull reports whether the key is present with a null value.
func (o Obj) IsNull(key string) bool {
	v, ok := o.v.Get(key)
	return ok && v.kind == KindNull
}

// Get returns the value of a key and its path; a missing key fails.
func (o Obj) Get(key string) (Value, string) {
	p := o.path + "." + key
	v, ok := o.v.Get(key)
	if !ok {
		o.d.Fail(p, "missing")
	}
	return v, p
}

// Object decodes a nested closed object.
func (o Obj) Object(key string, required, optional []string) Obj {
	v, p := o.Get(key)
	return o.d.Closed(v, p, required, optional)
}

// String decodes a string whose UTF-16 length is within [min, max].
func (o Obj) String(key string, min, max int) string {
	if v, ok := o.fast(key, KindString); ok && len(v.s) >= min && len(v.s) <= max && isASCII(v.s) {
		return v.s // ASCII: UTF-16 length is the byte length
	}
	v, p := o.Get(key)
	return o.d.String(v, p, min, max)
}

// fast returns the value of key when it is present with the wanted kind and
// no failure is recorded; getters use it to skip building paths.
func (o Obj) fast(key string, kind Kind) (Value, bool) {
	if o.d.err != nil {
		return Value{}, false
	}
	v, ok := o.v.Get(key)
	return v, ok && v.kind == kind
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// StringBytes decodes a string whose UTF-8 length is within [min, max].
func (o Obj) StringBytes(key string, min, max int) string {
	v, p := o.Get(key)
	return o.d.StringBytes(v, p, min, max)
}

// ID decodes an Id (1..128 UTF-16 units).
func (o Obj) ID(key string) string { return o.String(key, 1, 128) }

// EntityID decodes an EntityId (^[A-Za-z0-9_-]{1,128}$).
func (o Obj) EntityID(key string) string {
	if v, ok := o.fast(key, KindString); ok && IsEntityID(v.s) {
		return v.s
	}
	v, p := o.Get(key)
	return o.d.EntityID(v, p)
}

// Count decodes a safe integer >= 0.
func (o Obj) Count(key string) int64 {
	if v, ok := o.fast(key, KindNumber); ok && v.n >= 0 && v.n <= MaxSafeInteger && v.n == math.Trunc(v.n) {
		return int64(v.n)
	}
	v, p := o.Get(key)
	return o.d.SafeInt(v, p, 0, MaxSafeInteger)
}

// PosCount decodes a safe integer >= 1.
func (o Obj) PosCount(key string) int64 {
	v, p := o.Get(key)
	return o.d.SafeInt(v, p, 1, MaxSafeInteger)
}

// SafeInt decodes a safe integer within [min, max].
func (o Obj) SafeInt(key string, min, max int64) int64 {
	v, p := o.Get(key)
	return o.d.SafeInt(v, p, min, max)
}

// Number decodes any finite number.
func (o Obj) Number(key string) float64 {
	v, p := o.Get(key)
	return o.d.Finite(v, p)
}

// Bool decodes a boolean.
func (o Obj) Bool(key string) bool {
	if v, ok := o.fast(key, KindBool); ok {
		return v.b
	}
	v, p := o.Get(key)
	return o.d.Bool(v, p)
}

// Enum decodes a string that must be one of allowed.
func (o Obj) Enum(key string, allowed ...string) string {
	if v, ok := o.fast(key, KindString); ok && contains(allowed, v.s) {
		return v.s
	}
	v, p := o.Get(key)
	return o.d.Enum(v, p, allowed...)
}

// Literal requires the key to hold exactly the string want.
func (o Obj) Literal(key, want string) {
	v, p := o.Get(key)
	o.d.Enum(v, p, want)
}

// Array decodes an array with between min and max elements.
func (o Obj) Array(key string, min, max int) ([]Value, string) {
	v, p := o.Get(key)
	return o.d.Array(v, p, min, max), p
}

// String decodes a string whose UTF-16 length is within [min, max].
func (d *D) String(v Value, path string, min, max int) string {
	return d.sized(v, path, min, max, UTF16Len, "UTF-16 units")
}

// StringBytes decodes a string whose UTF-8 length is within [min, max].
func (d *D) StringBytes(v Value, path string, min, max int) string {
	return d.sized(v, path, min, max, func(s string) int { return len(s) }, "bytes")
}

// sized decodes a string whose size, as measured by size, is within [min, max].
func (d *D) sized(v Value, path string, min, max int, size func(string) int, unit string) string {
	if d.err != nil {
		return ""
	}
	if v.kind != KindString {
		d.Fail(path, "expected a string, got %s", v.kind)
		return ""
	}
	if n := size(v.s); n < min || n > max {
		d.Fail(path, "string of %d %s outside [%d, %d]", n, unit, min, max)
		return ""
	}
	return v.s
}

// ID decodes an Id: a string of 1..128 UTF-16 units.
func (d *D) ID(v Value, path string) string { return d.String(v, path, 1, 128) }

// IsEntityID reports whether s is a valid EntityId.
func IsEntityID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// EntityID decodes an EntityId.
func (d *D) EntityID(v Value, path string) string {
	s := d.ID(v, path)
	if d.err == nil && !IsEntityID(s) {
		d.Fail(path, "not an entity id")
		return ""
	}
	return s
}

// Pattern decodes a string that must match re.
func (d *D) Pattern(v Value, path string, re *regexp.Regexp) string {
	if d.err != nil {
		return ""
	}
	if v.kind != KindString {
		d.Fail(path, "expected a string, got %s", v.kind)
		return ""
	}
	if !re.MatchString(v.s) {
		d.Fail(path, "does not match %s", re)
		return ""
	}
	return v.s
}

// IsSafeInteger reports whether f is an integer within ±(2^53-1).
func IsSafeInteger(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f == math.Trunc(f) && math.Abs(f) <= MaxSafeInteger
}

// SafeInt decodes a safe integer within [min, max]. Like the original, the
// check is on the value, so 1.0, 1e2 and -0 are integers.
func (d *D) SafeInt(v Value, path string, min, max int64) int64 {
	if d.err != nil {
		return 0
	}
	if v.kind != KindNumber {
		d.Fail(path, "expected a number, got %s", v.kind)
		return 0
	}
	if !IsSafeInteger(v.n) {
		d.Fail(path, "not a safe integer")
		return 0
	}
	n := int64(v.n)
	if n < min || n > max {
		d.Fail(path, "%d outside [%d, %d]", n, min, max)
		return 0
	}
	return n
}

// Count decodes a safe integer >= 0.
func (d *D) Count(v Value, path string) int64 { return d.SafeInt(v, path, 0, MaxSafeInteger) }

// Finite decodes any finite number.
func (d *D) Finite(v Value, path string) float64 {
	if d.err != nil {
		return 0
	}
	if v.kind != KindNumber || math.IsInf(v.n, 0) || math.IsNaN(v.n) {
		d.Fail(path, "expected a finite number")
		return 0
	}
	return v.n
}

// Bool decodes a boolean.
func (d *D) Bool(v Value, path string) bool {
	if d.err != nil {
		return false
	}
	if v.kind != KindBool {
		d.Fail(path, "expected a boolean, got %s", v.kind)
		return false
	}
	return v.b
}

// Enum decodes a string that must be one of allowed.
func (d *D) Enum(v Value, path string, allowed ...string) string {
	if d.err != nil {
		return ""
	}
	if v.kind != KindString {
		d.Fail(path, "expected a string, got %s", v.kind)
		return ""
	}
	if !contains(allowed, v.s) {
		d.Fail(path, "%q is not one of %v", v.s, allowed)
		return ""
	}
	return v.s
}

// Array decodes an array with between min and max elements.
func (d *D) Array(v Value, path string, min, max int) []Value {
	if d.err != nil {
		return nil
	}
	if v.kind != KindArray {
		d.Fail(path, "expected an array, got %s", v.kind)
		return nil
	}
	if n := len(v.arr); n < min || n > max {
		d.Fail(path, "array of %d items outside [%d, %d]", n, min, max)
		return nil
	}
	return v.arr
}

// Index returns the path of an array element.
func Index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// EncodedWithin fails unless v encodes (with Marshal) to at most max bytes.
func (d *D) EncodedWithin(v any, path string, max int) {
	if d.err != nil {
		return
	}
	n, err := EncodedSize(v)
	if err != nil {
		d.Fail(path, "cannot encode: %v", err)
		return
	}
	if n > max {
		d.Fail(path, "encodes to %d bytes, more than %d", n, max)
	}
}
