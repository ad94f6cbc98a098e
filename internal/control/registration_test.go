package control

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/protocol"
)

func wantRegistrationCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *RegistrationError
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error = %v, want registration error %s", err, code)
	}
}

func sampleRegistration(rootID string) Registration {
	return Registration{
		Kind:          RegistrationKind,
		SchemaVersion: RegistrationSchemaVersion,
		RootID:        rootID,
		HostEpoch:     "6f1c2a4e-1b2c-4d5e-8f90-0123456789ab",
		Endpoint:      "/tmp/m-1000-AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv8-Ab12Cd/h.sock",
		ProtocolMin:   0,
		ProtocolMax:   0,
		State:         protocol.StateReady,
		PID:           12345,
		CreatedAt:     "2026-01-01T00:00:00.000Z",
	}
}

func TestRegistrationRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rootID := newRootID(t)
	reg := sampleRegistration(rootID)
	if err := WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, RegistrationFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"maka-runtime-host","schemaVersion":1,"rootId":"` + rootID +
		`","hostEpoch":"6f1c2a4e-1b2c-4d5e-8f90-0123456789ab","endpoint":"/tmp/m-1000-AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv8-Ab12Cd/h.sock",` +
		`"protocolMin":0,"protocolMax":0,"state":"ready","pid":12345,"createdAt":"2026-01-01T00:00:00.000Z"}` + "\n"
	if string(data) != want {
		t.Fatalf("file\n%s\nwant\n%s", data, want)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	got, found, err := ReadRegistration(dir)
	if err != nil || !found {
		t.Fatalf("read: %v %v", found, err)
	}
	if got != reg {
		t.Fatalf("read %+v, want %+v", got, reg)
	}
	reg.State = protocol.StateDraining
	reg.ProtocolMax = 3
	reg.Endpoint = "/tmp/é<>&\u2028"
	if err := WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	if got, _, err = ReadRegistration(dir); err != nil || got != reg {
		t.Fatalf("rewrite read %+v, %v", got, err)
	}
	data, _ = os.ReadFile(path)
	if !strings.Contains(string(data), `"endpoint":"/tmp/é<>&`+"\u2028"+`"`) {
		t.Fatalf("strings must be written unescaped like JSON.stringify: %s", data)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("control directory holds %v, want only the registration", entries)
	}
}

func TestReadRegistrationAbsent(t *testing.T) {
	_, found, err := ReadRegistration(t.TempDir())
	if err != nil || found {
		t.Fatalf("found=%v err=%v", found, err)
	}
	_, found, err = ReadRegistration(filepath.Join(t.TempDir(), "missing"))
	if err != nil || found {
		t.Fatalf("missing control dir: found=%v err=%v", found, err)
	}
}

// validFields returns the members of a valid registration as raw JSON.
func validFields(rootID string) [][2]string {
	return [][2]string{
		{"kind", `"maka-runtime-host"`},
		{"schemaVersion", `1`},
		{"rootId", `"` + rootID + `"`},
		{"hostEpoch", `"epoch"`},
		{"endpoint", `"/tmp/x/h.sock"`},
		{"protocolMin", `0`},
		{"protocolMax", `0`},
		{"state", `"starting"`},
		{"pid", `1`},
		{"createdAt", `"2026-01-01T00:00:00.000Z"`},
	}
}

func registrationJSON(rootID string, override map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	sep := ""
	for _, f := range validFields(rootID) {
		v := f[1]
		if o, ok := override[f[0]]; ok {
			v = o
		}
		if v == "-" {
			continue
		}
		b.WriteString(sep + `"` + f[0] + `":` + v)
		sep = ","
	}
	for k, v := range override {
		if strings.HasPrefix(k, "extra") {
			b.WriteString(sep + `"` + k + `":` + v)
			sep = ","
		}
	}
	b.WriteString("}")
	return b.String()
}

func TestDecodeRegistrationValidation(t *testing.T) {
	rootID := newRootID(t)
	emoji := func(n int) string { return `"` + strings.Repeat("😀", n) + `"` }
	valid := map[string]map[string]string{
		"baseline":               {},
		"extra keys":             {"extra1": `{"a":[1,2]}`, "extra2": `null`},
		"schema version 1.0":     {"schemaVersion": `1.0`},
		"protocol range":         {"protocolMin": `2`, "protocolMax": `5`},
		"protocol 1e2":           {"protocolMin": `1e2`, "protocolMax": `100`},
		"max safe pid":           {"pid": `9007199254740991`},
		"state containing":       {"state": `"containing"`},
		"state recovering":       {"state": `"recovering"`},
		"state ready":            {"state": `"ready"`},
		"state draining":         {"state": `"draining"`},
		"epoch of 128 units":     {"hostEpoch": emoji(64)},
		"endpoint of 512 units":  {"endpoint": `"` + strings.Repeat("é", 512) + `"`},
		"createdAt of 64 units":  {"createdAt": emoji(32)},
		"createdAt any text":     {"createdAt": `"yesterday"`},
		"protocolMin negative 0": {"protocolMin": `-0`},
	}
	for name, o := range valid {
		t.Run("valid/"+name, func(t *testing.T) {
			if _, err := DecodeRegistration([]byte(registrationJSON(rootID, o))); err != nil {
				t.Fatal(err)
			}
		})
	}
	invalid := map[string]map[string]string{
		"kind missing":                     {"kind": "-"},
		"kind other":                       {"kind": `"maka-host"`},
		"schema version 2":                 {"schemaVersion": `2`},
		"schema version string":            {"schemaVersion": `"1"`},
		"schema version missing":           {"schemaVersion": "-"},
		"root id upper":                    {"rootId": `"` + strings.ToUpper(rootID) + `"`},
		"root id short":                    {"rootId": `"` + rootID[:63] + `"`},
		"root id empty":                    {"rootId": `""`},
		"root id number":                   {"rootId": `1`},
		"root id missing":                  {"rootId": "-"},
		"epoch empty":                      {"hostEpoch": `""`},
		"epoch of 130 units":               {"hostEpoch": emoji(65)},
		"epoch of 129 units":               {"hostEpoch": `"` + strings.Repeat("a", 129) + `"`},
		"epoch null":                       {"hostEpoch": `null`},
		"endpoint empty":                   {"endpoint": `""`},
		"endpoint of 513 units":            {"endpoint": `"` + strings.Repeat("é", 513) + `"`},
		"endpoint missing":                 {"endpoint": "-"},
		"protocolMin negative":             {"protocolMin": `-1`},
		"protocolMin fraction":             {"protocolMin": `0.5`},
		"protocolMax unsafe":               {"protocolMax": `9007199254740992`},
		"protocol range inverted":          {"protocolMin": `1`, "protocolMax": `0`},
		"protocolMax string":               {"protocolMax": `"0"`},
		"state unknown":                    {"state": `"running"`},
		"state upper":                      {"state": `"READY"`},
		"pid zero":                         {"pid": `0`},
		"pid negative":                     {"pid": `-5`},
		"pid fraction":                     {"pid": `1.5`},
		"pid missing":                      {"pid": "-"},
		"createdAt empty":                  {"createdAt": `""`},
		"createdAt of 65 units":            {"createdAt": `"` + strings.Repeat("x", 65) + `"`},
		"createdAt of 66 units (33 emoji)": {"createdAt": emoji(33)},
	}
	for name, o := range invalid {
		t.Run("invalid/"+name, func(t *testing.T) {
			_, err := DecodeRegistration([]byte(registrationJSON(rootID, o)))
			wantRegistrationCode(t, err, CodeInvalidRegistration)
		})
	}
	for _, raw := range []string{"", "{", "[]", "null", `"x"`, "{} {}", "\xff"} {
		_, err := DecodeRegistration([]byte(raw))
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	}
}

func TestWriteRegistrationValidates(t *testing.T) {
	dir := t.TempDir()
	rootID := newRootID(t)
	bad := []func(*Registration){
		func(r *Registration) { r.Kind = "other" },
		func(r *Registration) { r.SchemaVersion = 2 },
		func(r *Registration) { r.RootID = "abc" },
		func(r *Registration) { r.HostEpoch = "" },
		func(r *Registration) { r.Endpoint = strings.Repeat("x", 513) },
		func(r *Registration) { r.ProtocolMin = 1 },
		func(r *Registration) { r.ProtocolMin = -1 },
		func(r *Registration) { r.ProtocolMax = 1 << 60 },
		func(r *Registration) { r.State = "" },
		func(r *Registration) { r.PID = 0 },
		func(r *Registration) { r.CreatedAt = "" },
	}
	for i, mutate := range bad {
		reg := sampleRegistration(rootID)
		mutate(&reg)
		wantRegistrationCode(t, WriteRegistration(dir, reg), CodeInvalidRegistration)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Fatalf("case %d wrote %v", i, entries)
		}
	}
	wantRegistrationCode(t, WriteRegistration(filepath.Join(dir, "missing"), sampleRegistration(rootID)), CodeRegistrationIOFailed)
}

func TestReadRegistrationRejectsBadFiles(t *testing.T) {
	rootID := newRootID(t)
	valid := registrationJSON(rootID, nil)
	path := func(dir string) string { return filepath.Join(dir, RegistrationFile) }

	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "elsewhere.json")
		if err := os.WriteFile(target, []byte(valid), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path(dir)); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(path(dir), 0o700); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("fifo", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mkfifo(path(dir), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("size limit", func(t *testing.T) {
		dir := t.TempDir()
		exact := valid + strings.Repeat(" ", MaxRegistrationBytes-len(valid))
		if err := os.WriteFile(path(dir), []byte(exact), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, found, err := ReadRegistration(dir); err != nil || !found {
			t.Fatalf("file of exactly %d bytes: %v %v", MaxRegistrationBytes, found, err)
		}
		if err := os.WriteFile(path(dir), []byte(exact+" "), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("bad json", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(path(dir), []byte(valid[:len(valid)-1]), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("invalid field", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(path(dir), []byte(registrationJSON(rootID, map[string]string{"pid": "0"})), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(dir)
		wantRegistrationCode(t, err, CodeInvalidRegistration)
	})
	t.Run("control dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadRegistration(file)
		wantRegistrationCode(t, err, CodeRegistrationIOFailed)
	})
}

func TestRegistrationRewritesAreAtomic(t *testing.T) {
	dir := t.TempDir()
	rootID := newRootID(t)
	regFor := func(i int) Registration {
		r := sampleRegistration(rootID)
		r.PID = int64(i + 1)
		r.HostEpoch = fmt.Sprintf("epoch-%d", i+1)
		// vary the size so that a torn write would show
		r.Endpoint = "/tmp/" + strings.Repeat("e", 1+(i*37)%400) + "/h.sock"
		r.State = protocol.HostState(registrationStates[i%len(registrationStates)])
		return r
	}
	if err := WriteRegistration(dir, regFor(0)); err != nil {
		t.Fatal(err)
	}
	const rewrites = 200
	started := make(chan struct{})
	done := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		defer close(done)
		<-started
		for i := 1; i < rewrites; i++ {
			if err := WriteRegistration(dir, regFor(i)); err != nil {
				writerErr <- err
				return
			}
		}
	}()
	reads := 0
	readerErr := make(chan error, 1)
	go func() {
		defer close(readerErr)
		defer func() {
			if reads == 0 {
				close(started)
			}
		}()
		for {
			got, found, err := ReadRegistration(dir)
			if err != nil {
				readerErr <- err
				return
			}
			if !found {
				readerErr <- errors.New("registration vanished during a rewrite")
				return
			}
			if want := regFor(int(got.PID) - 1); got != want {
				readerErr <- fmt.Errorf("read a mixed registration %+v", got)
				return
			}
			if reads++; reads == 1 {
				close(started) // the writer starts once reads are under way
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	if err := <-readerErr; err != nil {
		<-done
		t.Fatal(err)
	}
	<-done
	select {
	case err := <-writerErr:
		t.Fatal(err)
	default:
	}
	got, _, err := ReadRegistration(dir)
	if err != nil || got != regFor(rewrites-1) {
		t.Fatalf("final registration %+v, %v", got, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("rewrites left %d files", len(entries))
	}
	t.Logf("%d concurrent reads", reads)
}

func TestRemoveRegistration(t *testing.T) {
	dir := t.TempDir()
	rootID := newRootID(t)
	reg := sampleRegistration(rootID)
	if err := RemoveRegistration(dir, reg.HostEpoch); err != nil {
		t.Fatalf("removing an absent registration: %v", err)
	}
	if err := WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	successor := reg
	successor.HostEpoch = "successor"
	if err := WriteRegistration(dir, successor); err != nil {
		t.Fatal(err)
	}
	if err := RemoveRegistration(dir, reg.HostEpoch); err != nil {
		t.Fatal(err)
	}
	got, found, err := ReadRegistration(dir)
	if err != nil || !found || got.HostEpoch != "successor" {
		t.Fatalf("successor's registration removed: %+v %v %v", got, found, err)
	}
	if err := RemoveRegistration(dir, "successor"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := ReadRegistration(dir); err != nil || found {
		t.Fatalf("own registration not removed: %v %v", found, err)
	}
	// An unreadable registration is left alone.
	if err := os.WriteFile(filepath.Join(dir, RegistrationFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveRegistration(dir, "successor"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, RegistrationFile)); err != nil {
		t.Fatalf("invalid registration removed: %v", err)
	}
}
