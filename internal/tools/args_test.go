package tools

import (
	"encoding/json"
	"testing"
)

func TestStrictArguments(t *testing.T) {
	env := newEnv(t)
	writeFile(t, env, "a.txt", "hello\n")
	tests := []struct {
		tool, args, want string
	}{
		{NameRead, `{"path":"a.txt","bogus":1}`, `unknown argument "bogus"`},
		{NameRead, `{"PATH":"a.txt"}`, `unknown argument "PATH"`},
		{NameRead, `{"path":7}`, `argument "path" must be a string, got number`},
		{NameRead, `{"path":"a.txt","offset":"3"}`, `argument "offset" must be an integer, got string`},
		{NameRead, `{"path":"a.txt","offset":1.5}`, `argument "offset" must be an integer`},
		{NameRead, `{"path":"a.txt","limit":0}`, `limit must be > 0`},
		{NameRead, `{"path":"a.txt","offset":-1}`, `offset must be >= 0`},
		{NameRead, `[]`, `must be a JSON object, got array`},
		{NameRead, `"a.txt"`, `must be a JSON object, got string`},
		{NameRead, `{"path":`, `not valid JSON`},
		{NameRead, `{}`, `missing required argument "path"`},
		{NameRead, ``, `missing required argument "path"`},
		{NameWrite, `{"path":"b.txt"}`, `missing required argument "content"`},
		{NameWrite, `{"path":"b.txt","content":["x"]}`, `argument "content" must be a string, got array`},
		{NameEdit, `{"path":"a.txt","old_string":"x"}`, `missing required argument "new_string"`},
		{NameEdit, `{"path":"a.txt","old_string":null,"new_string":"y"}`, `missing required argument "old_string"`},
		{NameBash, `{"command":true}`, `argument "command" must be a string, got bool`},
		{NameBash, `{"command":"echo","timeout_ms":"5"}`, `argument "timeout_ms" must be an integer`},
		{NameBash, `{"command":"echo","timeout_ms":0}`, `timeout_ms must be > 0`},
		{NameBash, `{"command":"   "}`, `command must not be empty`},
		{NameBash, `{"cmd":"echo"}`, `unknown argument "cmd"`},
		{NameGlob, `{"pattern":{}}`, `argument "pattern" must be a string, got object`},
		{NameGlob, `{"pattern":"*","cwd":1}`, `argument "cwd" must be a string`},
		{NameGrep, `{"pattern":"x","glob":false}`, `argument "glob" must be a string`},
		{NameGrep, `{"pattern":""}`, `pattern must not be empty`},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			r := run(t, byName(t, tt.tool), env, tt.args)
			mustError(t, r, tt.want)
			if !containsFold(r.ModelText, "invalid arguments for "+tt.tool) {
				t.Errorf("model text %q does not name the tool", r.ModelText)
			}
		})
	}
}

func TestParametersAreSchemas(t *testing.T) {
	for _, tool := range Builtins() {
		var schema struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			Required             []string                   `json:"required"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(tool.Parameters(), &schema); err != nil {
			t.Fatalf("%s: %v", tool.Name(), err)
		}
		if schema.Type != "object" || len(schema.Required) == 0 || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s: schema %s", tool.Name(), tool.Parameters())
		}
		for _, req := range schema.Required {
			if _, ok := schema.Properties[req]; !ok {
				t.Errorf("%s: required %q is not a property", tool.Name(), req)
			}
		}
		if tool.Description() == "" || tool.ActivityKind() == "" {
			t.Errorf("%s: missing description or activity kind", tool.Name())
		}
	}
}
