package shellsafe

import (
	"fmt"
	"strings"
)

// goFlag splits a Go-style flag (-name, --name, -name=value) into its name
// and value.
func goFlag(v string) (name, value string, hasValue bool) {
	v = strings.TrimPrefix(strings.TrimPrefix(v, "-"), "-")
	return strings.Cut(v, "=")
}

// goBool reports whether a bool flag's value, if given, is a Go bool.
func goBool(value string, hasValue bool) bool {
	if !hasValue {
		return true
	}
	switch value {
	case "1", "0", "t", "f", "T", "F", "true", "false", "TRUE", "FALSE", "True", "False":
		return true
	}
	return false
}

// goSubs are the allowed go subcommands: for each, its bool flags and its
// flags that take a value.
var goSubs = map[string]struct {
	bools, values map[string]bool
}{
	"env":  {bools: set("json", "changed")},
	"doc":  {bools: set("all", "c", "cmd", "short", "src", "u")},
	"list": {bools: set("e", "deps", "test", "find", "m", "json"), values: set("f", "tags")},
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// goRefused explains some refused flags, by subcommand and flag.
var goRefused = map[string]string{
	"env -w": "changes the go environment", "env -u": "changes the go environment",
	"list -exec": "runs a program", "list -toolexec": "runs a program",
	"list -export": "builds packages", "list -compiled": "builds packages",
	"list -u": "reaches the network", "list -versions": "reaches the network",
	"list -retracted": "reaches the network", "list -mod": "may change go.mod",
	"list -modfile": "reads another go.mod", "doc -http": "starts a server",
}

// checkGo allows go version, go env (reading), go list of local packages
// and go doc.
func checkGo(prog string, args []word) string {
	if len(args) == 0 {
		return ""
	}
	sub := args[0].val
	if sub == "version" {
		return ""
	}
	rules, ok := goSubs[sub]
	if !ok {
		return fmt.Sprintf("`%s %s` is not read-only", prog, shorten(sub))
	}
	name := prog + " " + sub
	rest := args[1:]
	var operands []word
	modules := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a.operand() {
			operands = append(operands, a)
			continue
		}
		if a.val == "--" {
			operands = append(operands, rest[i+1:]...)
			break
		}
		flag, value, hasValue := goFlag(a.val)
		switch {
		case sub == "list" && flag == "json":
			// -json takes an optional list of fields: -json=Dir,Name.
		case rules.bools[flag]:
			if !goBool(value, hasValue) {
				return badOption(name, a.val, nil)
			}
			if flag == "m" {
				modules = true
			}
		case rules.values[flag]:
			if !hasValue {
				i++
			}
		default:
			if why, ok := goRefused[sub+" -"+flag]; ok {
				return fmt.Sprintf("`%s -%s` %s", name, flag, why)
			}
			return badOption(name, a.val, nil)
		}
	}
	if sub != "list" {
		return ""
	}
	for _, a := range operands {
		if why := goListOperand(a.val, modules); why != "" {
			return fmt.Sprintf("`%s %s` %s", name, shorten(a.val), why)
		}
	}
	return ""
}

// goListOperand allows packages that go list resolves without the network:
// relative and absolute directories, the standard library, std, cmd and all.
// A module path with a dot or a version would make go download it.
func goListOperand(v string, modules bool) string {
	if modules {
		if v == "all" {
			return ""
		}
		return "may download modules"
	}
	if strings.Contains(v, "@") {
		return "may download modules"
	}
	if v == "." || v == ".." || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") || strings.HasPrefix(v, "/") {
		return ""
	}
	first, _, _ := strings.Cut(v, "/")
	if strings.Contains(first, ".") {
		return "may download modules"
	}
	return ""
}
