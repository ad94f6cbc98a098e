package protocol

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const (
	cfgUUID1 = "0f8fad5b-d9cb-469f-a165-70867728950e"
	cfgUUID2 = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"

	cfgDraft = `{"slug":"my-openai","name":"","providerType":"openai","enabled":true,"enabledModelIds":["gpt-4o","o3"]}`
	cfgBasis = `{"connectionId":"` + cfgUUID1 + `","revision":3}`
	cfgTgt   = `{"connectionId":"` + cfgUUID1 + `","modelId":"gpt-4o"}`
	cfgModel = `{"id":"gpt-4o","displayName":"GPT-4o","apiProtocol":"openai-chat","contextWindow":128000,` +
		`"maxOutputTokens":16384,"capabilities":{"chat":true,"vision":true,"reasoning":false,"functionCalling":true,"imageGeneration":false}}`
	cfgHeader0 = `{"kind":"connection","connectionIndex":0,"connectionId":"` + cfgUUID1 + `","revision":3,"slug":"my-openai",` +
		`"name":"Work","providerType":"openai","baseUrl":"https://proxy.example/v1","enabled":true,"modelSource":"fetched",` +
		`"modelsFetchedAt":1700000000000,"lastTest":{"status":"error","checkedAt":"2024-01-01T00:00:00Z","errorClass":"timeout"},` +
		`"enabledModelIdCount":2,"modelCount":2}`
	cfgHeader1 = `{"kind":"connection","connectionIndex":1,"connectionId":"` + cfgUUID2 + `","revision":1,"slug":"local",` +
		`"name":"","providerType":"ollama","enabled":false,"enabledModelIdCount":0,"modelCount":0}`
	cfgEnabled00 = `{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":0,"modelId":"gpt-4o"}`
	cfgEnabled01 = `{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":1,"modelId":"o3"}`
	cfgModel00   = `{"kind":"model","connectionIndex":0,"itemIndex":0,"model":` + cfgModel + `}`
	cfgModel01   = `{"kind":"model","connectionIndex":0,"itemIndex":1,"model":{"id":"o3"}}`
)

func cfgPage(defaultTarget string, count int, next string, items ...string) string {
	return `{"kind":"page","revision":7,"defaultTarget":` + defaultTarget + `,"connectionCount":` + strconv.Itoa(count) +
		`,"items":[` + strings.Join(items, ",") + `],"nextCursor":` + next + `}`
}

var cfgFullPage = cfgPage(cfgTgt, 2, "null", cfgHeader0, cfgEnabled00, cfgEnabled01, cfgModel00, cfgModel01, cfgHeader1)

// cfgHeader returns a canonical header of connection 0; extra is inserted
// after "enabled" and must end with a comma.
func cfgHeader(provider, baseURL, extra string, enabledCount, modelCount int) string {
	b := ""
	if baseURL != "" {
		b = `"baseUrl":` + cfgStr(baseURL) + `,`
	}
	return `{"kind":"connection","connectionIndex":0,"connectionId":"` + cfgUUID2 + `","revision":1,"slug":"local","name":"",` +
		`"providerType":` + cfgStr(provider) + `,` + b + `"enabled":false,` + extra +
		`"enabledModelIdCount":` + strconv.Itoa(enabledCount) + `,"modelCount":` + strconv.Itoa(modelCount) + `}`
}

func cfgCreate(draft string) string {
	return `{"expectedCatalogRevision":5,"connection":` + draft + `}`
}

func cfgUpdate(changes string) string {
	return `{"expected":` + cfgBasis + `,"changes":` + changes + `}`
}

const cfgChanges = `{"name":"Renamed","enabled":false,"enabledModelIds":[]}`

func catalogValidCases(t testing.TB) []cfgCase {
	q := OpConnectionCatalogQuery
	cr, up := OpConnectionCatalogCreate, OpConnectionCatalogUpdate
	rm, sd := OpConnectionCatalogRemove, OpConnectionCatalogSetDefaultTarget
	draft := func(edits ...string) string { return cfgCreate(cfgEdit(t, cfgDraft, edits...)) }
	ids64 := cfgStrings(cfgDistinct(64, 512)...)
	enabled := func(i int) string {
		return `{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":` + strconv.Itoa(i) + `,"modelId":"m` + strconv.Itoa(i) + `"}`
	}
	items128 := []string{cfgEdit(t, cfgHeader1, "connectionIndex=0", "enabledModelIdCount=512")}
	for i := range 127 {
		items128 = append(items128, enabled(i))
	}
	return []cfgCase{
		{name: "query start", op: q, in: `{"kind":"start"}`},
		{name: "query continue connection", op: q, in: `{"kind":"continue","revision":7,"cursor":{"connectionIndex":1023,"part":"connection"}}`},
		{name: "query continue enabled id", op: q, in: `{"kind":"continue","revision":0,"cursor":{"connectionIndex":0,"part":"enabled_model_id","itemIndex":511}}`},
		{name: "query continue model", op: q, in: `{"kind":"continue","revision":9007199254740991,"cursor":{"connectionIndex":3,"part":"model","itemIndex":2047}}`},

		{name: "full page", op: q, out: true, in: cfgFullPage},
		{name: "page with next cursor", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":1,"part":"connection"}`, cfgHeader0, cfgEnabled00, cfgEnabled01, cfgModel00, cfgModel01)},
		{name: "page continuing mid connection", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":0,"part":"model","itemIndex":1}`, cfgEnabled01, cfgModel00)},
		{name: "next cursor skipping ahead", op: q, out: true,
			in: cfgPage("null", 5, `{"connectionIndex":4,"part":"enabled_model_id","itemIndex":0}`, cfgHeader1)},
		{name: "page continuing in a later connection", op: q, out: true,
			in: cfgPage("null", 3, "null", `{"kind":"enabled_model_id","connectionIndex":2,"itemIndex":1,"modelId":"o3"}`,
				`{"kind":"model","connectionIndex":2,"itemIndex":0,"model":{"id":"o3"}}`)},
		{name: "empty page", op: q, out: true, in: cfgPage("null", 0, "null")},
		{name: "page of 128 items", op: q, out: true, in: cfgPage("null", 1, `{"connectionIndex":0,"part":"enabled_model_id","itemIndex":127}`, items128...)},
		{name: "header with fallback models", op: q, out: true,
			in: cfgPage("null", 1, "null", cfgHeader("ollama", "", `"modelSource":"fallback","modelsFetchedAt":0,`, 512, 2048))},
		{name: "header with oauth provider and no base url", op: q, out: true,
			in: cfgPage("null", 1, "null", cfgHeader("github-copilot", "", "", 0, 0))},
		{name: "header with canonical override", op: q, out: true,
			in: cfgPage("null", 1, "null", cfgHeader("deepseek", "http://[::1]:8080/", "", 0, 0))},
		{name: "header base url of 2048 units", op: q, out: true,
			in: cfgPage("null", 1, "null", cfgHeader("groq", "https://x.example/"+strings.Repeat("p", 2048-18), "", 0, 0))},
		{name: "header test summary without error class", op: q, out: true,
			in: cfgPage("null", 1, "null", cfgHeader("ollama", "", `"lastTest":{"status":"verified","checkedAt":"x"},`, 0, 0))},
		{name: "header with 1023 index and 256 name", op: q, out: true,
			in: cfgPage("null", 1024, "null", cfgEdit(t, cfgHeader1, "connectionIndex=1023", "name="+cfgStr(strings.Repeat("😀", 128))))},
		{name: "model item bounds", op: q, out: true,
			in: cfgPage("null", 1, "null", `{"kind":"model","connectionIndex":0,"itemIndex":2047,"model":{"id":`+cfgStr(strings.Repeat("m", 512))+
				`,"displayName":"","contextWindow":9007199254740991,"capabilities":{}}}`)},
		{name: "model capabilities reordered", op: q, out: true,
			in:   cfgPage("null", 1, "null", `{"kind":"model","connectionIndex":0,"itemIndex":0,"model":{"id":"x","capabilities":{"vision":false,"chat":true}}}`),
			want: cfgPage("null", 1, "null", `{"kind":"model","connectionIndex":0,"itemIndex":0,"model":{"id":"x","capabilities":{"chat":true,"vision":false}}}`)},
		{name: "enabled id item bounds", op: q, out: true,
			in: cfgPage("null", 1, "null", `{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":511,"modelId":`+cfgStr(strings.Repeat("😀", 256))+`}`)},
		{name: "revision changed", op: q, out: true, in: `{"kind":"revision_changed","expectedRevision":3,"actualRevision":4}`},

		{name: "create", op: cr, in: cfgCreate(cfgDraft)},
		{name: "create with override", op: cr, in: draft(`baseUrl="https://proxy.example/v1"`),
			want: cfgCreate(`{"slug":"my-openai","name":"","providerType":"openai","baseUrl":"https://proxy.example/v1","enabled":true,"enabledModelIds":["gpt-4o","o3"]}`)},
		{name: "create normalizes base url", op: cr, in: draft(`baseUrl="  HTTPS://Proxy.Example:443/v1/../v2 "`),
			want: cfgCreate(`{"slug":"my-openai","name":"","providerType":"openai","baseUrl":"https://proxy.example/v2","enabled":true,"enabledModelIds":["gpt-4o","o3"]}`)},
		{name: "create drops provider default", op: cr, in: draft(`baseUrl="https://API.openai.com/v1"`), want: cfgCreate(cfgDraft)},
		{name: "create drops blank base url", op: cr, in: draft(`baseUrl=" "`), want: cfgCreate(cfgDraft)},
		{name: "create oauth provider without base url", op: cr, in: draft(`providerType="claude-subscription"`, `baseUrl=""`),
			want: draft(`providerType="claude-subscription"`)},
		{name: "create base url of 2048 units", op: cr,
			in: draft(`providerType="groq"`, "baseUrl="+cfgStr("https://x.example/"+strings.Repeat("p", 2048-18))),
			want: cfgCreate(`{"slug":"my-openai","name":"","providerType":"groq","baseUrl":"https://x.example/` + strings.Repeat("p", 2048-18) +
				`","enabled":true,"enabledModelIds":["gpt-4o","o3"]}`)},
		{name: "create 64 ids of 512", op: cr, in: draft("enabledModelIds=" + ids64)},
		{name: "create no ids", op: cr, in: draft("enabledModelIds=[]")},
		{name: "create slug bounds", op: cr, in: draft(`slug="a0"`)},
		{name: "create slug 64", op: cr, in: draft("slug=" + cfgStr("a-"+strings.Repeat("9", 62)))},
		{name: "create slug double hyphen", op: cr, in: draft(`slug="a--b"`)},
		{name: "create name 256", op: cr, in: draft("name=" + cfgStr(strings.Repeat("n", 256)))},
		{name: "create key order normalized", op: cr,
			in:   `{"connection":{"enabledModelIds":[],"enabled":false,"providerType":"localai","name":"n","slug":"ai"},"expectedCatalogRevision":1e0}`,
			want: `{"expectedCatalogRevision":1,"connection":{"slug":"ai","name":"n","providerType":"localai","enabled":false,"enabledModelIds":[]}}`},

		{name: "update", op: up, in: cfgUpdate(cfgChanges)},
		{name: "update keeps default-looking base url", op: up,
			in:   cfgUpdate(`{"name":"n","baseUrl":"https://api.openai.com/v1","enabled":true,"enabledModelIds":["a"]}`),
			want: cfgUpdate(`{"name":"n","baseUrl":"https://api.openai.com/v1","enabled":true,"enabledModelIds":["a"]}`)},
		{name: "update canonicalizes base url", op: up,
			in:   cfgUpdate(`{"name":"n","baseUrl":"http://LOCALHOST:80","enabled":true,"enabledModelIds":[]}`),
			want: cfgUpdate(`{"name":"n","baseUrl":"http://localhost/","enabled":true,"enabledModelIds":[]}`)},
		{name: "update blank base url", op: up,
			in: cfgUpdate(`{"name":"n","baseUrl":"","enabled":true,"enabledModelIds":[]}`), want: cfgUpdate(`{"name":"n","enabled":true,"enabledModelIds":[]}`)},
		{name: "update 64 ids", op: up, in: cfgUpdate(cfgEdit(t, cfgChanges, "enabledModelIds="+ids64))},
		{name: "update uppercase uuid", op: up, in: `{"expected":{"connectionId":"` + cfgUUID2 + `","revision":1},"changes":` + cfgChanges + `}`},

		{name: "remove", op: rm, in: `{"expected":` + cfgBasis + `}`},
		{name: "set default target", op: sd, in: `{"expectedCatalogRevision":2,"target":` + cfgTgt + `}`},
		{name: "clear default target", op: sd, in: `{"expectedCatalogRevision":0,"target":null}`},

		{name: "create committed", op: cr, out: true, in: `{"kind":"committed","catalogRevision":6,"connection":` + cfgBasis + `}`},
		{name: "create exists", op: cr, out: true, in: `{"kind":"connection_exists","slug":"my-openai"}`},
		{name: "create conflict", op: cr, out: true, in: `{"kind":"revision_conflict","expectedRevision":5,"actualRevision":6}`},
		{name: "update committed", op: up, out: true, in: `{"kind":"committed","catalogRevision":6,"connection":` + cfgBasis + `}`},
		{name: "update stale", op: up, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":{"connectionId":"` + cfgUUID1 + `","revision":4}}`},
		{name: "update stale removed", op: up, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":null}`},
		{name: "update invalid default", op: up, out: true, in: `{"kind":"invalid_default_target","target":` + cfgTgt + `}`},
		{name: "remove committed", op: rm, out: true, in: `{"kind":"committed","catalogRevision":0}`},
		{name: "remove stale", op: rm, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":null}`},
		{name: "set default committed", op: sd, out: true, in: `{"kind":"committed","catalogRevision":3}`},
		{name: "set default conflict", op: sd, out: true, in: `{"kind":"revision_conflict","expectedRevision":2,"actualRevision":3}`},
		{name: "set default invalid", op: sd, out: true, in: `{"kind":"invalid_default_target","target":` + cfgTgt + `}`},
	}
}

func TestCatalogValid(t *testing.T) { cfgCheckValid(t, catalogValidCases(t)) }

func TestCatalogInvalid(t *testing.T) {
	q := OpConnectionCatalogQuery
	cr, up := OpConnectionCatalogCreate, OpConnectionCatalogUpdate
	rm, sd := OpConnectionCatalogRemove, OpConnectionCatalogSetDefaultTarget
	draft := func(edits ...string) string { return cfgCreate(cfgEdit(t, cfgDraft, edits...)) }
	changes := func(edits ...string) string { return cfgUpdate(cfgEdit(t, cfgChanges, edits...)) }
	cont := func(cursor string) string { return `{"kind":"continue","revision":1,"cursor":` + cursor + `}` }
	page := func(edits ...string) string { return cfgEdit(t, cfgFullPage, edits...) }
	one := func(item string) string { return cfgPage("null", 1, "null", item) }
	h1 := func(edits ...string) string {
		return one(cfgEdit(t, cfgHeader1, append([]string{"connectionIndex=0"}, edits...)...))
	}
	model := func(m string) string {
		return one(`{"kind":"model","connectionIndex":0,"itemIndex":0,"model":` + m + `}`)
	}
	cases := []cfgCase{
		{name: "query input null", op: q, in: `null`},
		{name: "query no kind", op: q, in: `{}`},
		{name: "query unknown kind", op: q, in: `{"kind":"resume"}`},
		{name: "query start extra key", op: q, in: `{"kind":"start","revision":1}`},
		{name: "query continue missing cursor", op: q, in: `{"kind":"continue","revision":1}`},
		{name: "query continue null cursor", op: q, in: cont("null")},
		{name: "query continue negative revision", op: q, in: `{"kind":"continue","revision":-1,"cursor":{"connectionIndex":0,"part":"connection"}}`},
		{name: "cursor connection index 1024", op: q, in: cont(`{"connectionIndex":1024,"part":"connection"}`)},
		{name: "cursor connection index negative", op: q, in: cont(`{"connectionIndex":-1,"part":"connection"}`)},
		{name: "cursor connection with item index", op: q, in: cont(`{"connectionIndex":0,"part":"connection","itemIndex":0}`)},
		{name: "cursor enabled without item index", op: q, in: cont(`{"connectionIndex":0,"part":"enabled_model_id"}`)},
		{name: "cursor enabled index 512", op: q, in: cont(`{"connectionIndex":0,"part":"enabled_model_id","itemIndex":512}`)},
		{name: "cursor model index 2048", op: q, in: cont(`{"connectionIndex":0,"part":"model","itemIndex":2048}`)},
		{name: "cursor model index fractional", op: q, in: cont(`{"connectionIndex":0,"part":"model","itemIndex":0.5}`)},
		{name: "cursor unknown part", op: q, in: cont(`{"connectionIndex":0,"part":"header"}`)},
		{name: "cursor part missing", op: q, in: cont(`{"connectionIndex":0}`)},
		{name: "cursor extra key", op: q, in: cont(`{"connectionIndex":0,"part":"connection","x":1}`)},

		{name: "result unknown kind", op: q, out: true, in: `{"kind":"pages"}`},
		{name: "revision changed extra key", op: q, out: true, in: `{"kind":"revision_changed","expectedRevision":3,"actualRevision":4,"x":1}`},
		{name: "page missing next cursor", op: q, out: true, in: page("-nextCursor")},
		{name: "page extra key", op: q, out: true, in: page("x=1")},
		{name: "page revision negative", op: q, out: true, in: page("revision=-1")},
		{name: "page connection count 1025", op: q, out: true, in: page("connectionCount=1025")},
		{name: "page items null", op: q, out: true, in: page("items=null")},
		{name: "page item not an object", op: q, out: true, in: page("items/0=1")},
		{name: "page item kind unknown", op: q, out: true, in: page(`items/0/kind="header"`)},
		{name: "page default target invalid", op: q, out: true, in: page(`defaultTarget/modelId=""`)},
		{name: "page default target bad uuid", op: q, out: true, in: page(`defaultTarget/connectionId="abc"`)},
		{name: "page default target missing", op: q, out: true, in: page("-defaultTarget")},
		{name: "page 129 items", op: q, out: true, in: cfgPage("null", 1, "null", cfgPage129Items(t)...)},
		{name: "empty page with count", op: q, out: true, in: cfgPage("null", 1, "null")},
		{name: "empty page with default target", op: q, out: true, in: cfgPage(cfgTgt, 0, "null")},
		{name: "empty page with next cursor", op: q, out: true, in: cfgPage("null", 0, `{"connectionIndex":0,"part":"connection"}`)},
		{name: "item beyond connection count", op: q, out: true, in: page("connectionCount=1")},
		{name: "items out of order", op: q, out: true, in: cfgPage("null", 2, "null", cfgHeader0, cfgEnabled01, cfgEnabled00)},
		{name: "item repeated", op: q, out: true, in: cfgPage("null", 2, "null", cfgHeader0, cfgHeader0)},
		{name: "model before enabled id", op: q, out: true, in: cfgPage("null", 2, "null", cfgModel00, cfgEnabled01)},
		{name: "header after its items", op: q, out: true, in: cfgPage("null", 2, "null", cfgEnabled00, cfgHeader0)},
		{name: "next cursor at last item", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":0,"part":"model","itemIndex":1}`, cfgHeader0, cfgModel01)},
		{name: "next cursor before last item", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":0,"part":"connection"}`, cfgHeader0, cfgModel01)},
		{name: "next cursor beyond count", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":2,"part":"connection"}`, cfgHeader0)},
		{name: "next cursor invalid", op: q, out: true,
			in: cfgPage("null", 2, `{"connectionIndex":1,"part":"model"}`, cfgHeader0)},

		{name: "header missing key", op: q, out: true, in: h1("-enabled")},
		{name: "header unknown key", op: q, out: true, in: h1(`enabledModelIds=[]`)},
		{name: "header models key", op: q, out: true, in: h1(`models=[]`)},
		{name: "header connection index 1024", op: q, out: true, in: cfgPage("null", 1024, "null", cfgEdit(t, cfgHeader1, "connectionIndex=1024"))},
		{name: "header bad uuid", op: q, out: true, in: h1(`connectionId="0f8fad5b-d9cb-069f-a165-70867728950e"`)},
		{name: "header uuid variant", op: q, out: true, in: h1(`connectionId="0f8fad5b-d9cb-469f-c165-70867728950e"`)},
		{name: "header uuid version 9", op: q, out: true, in: h1(`connectionId="0f8fad5b-d9cb-969f-a165-70867728950e"`)},
		{name: "header revision 0", op: q, out: true, in: h1("revision=0")},
		{name: "header slug single char", op: q, out: true, in: h1(`slug="a"`)},
		{name: "header slug uppercase", op: q, out: true, in: h1(`slug="Local"`)},
		{name: "header name 257", op: q, out: true, in: h1("name=" + cfgStr(strings.Repeat("n", 257)))},
		{name: "header name null", op: q, out: true, in: h1("name=null")},
		{name: "header provider unknown", op: q, out: true, in: h1(`providerType="acme"`)},
		{name: "header enabled string", op: q, out: true, in: h1(`enabled="no"`)},
		{name: "header base url not canonical", op: q, out: true, in: h1(`providerType="groq"`, `baseUrl="https://X.example/"`)},
		{name: "header base url missing slash", op: q, out: true, in: h1(`providerType="groq"`, `baseUrl="https://x.example"`)},
		{name: "header base url empty", op: q, out: true, in: h1(`providerType="groq"`, `baseUrl=""`)},
		{name: "header base url provider default", op: q, out: true, in: h1(`providerType="ollama"`, `baseUrl="http://localhost:11434/v1"`)},
		{name: "header base url on oauth provider", op: q, out: true, in: h1(`providerType="openai-codex"`, `baseUrl="https://x.example/"`)},
		{name: "header base url with query", op: q, out: true, in: h1(`providerType="groq"`, `baseUrl="https://x.example/?a"`)},
		{name: "header base url 2049", op: q, out: true,
			in: h1(`providerType="groq"`, "baseUrl="+cfgStr("https://x.example/"+strings.Repeat("p", 2049-18)))},
		{name: "header model source without time", op: q, out: true, in: h1(`modelSource="fetched"`)},
		{name: "header time without model source", op: q, out: true, in: h1("modelsFetchedAt=1")},
		{name: "header model source unknown", op: q, out: true, in: h1(`modelSource="cached"`, "modelsFetchedAt=1")},
		{name: "header fetched at negative", op: q, out: true, in: h1(`modelSource="fetched"`, "modelsFetchedAt=-1")},
		{name: "header models before discovery", op: q, out: true, in: h1("modelCount=1")},
		{name: "header model count 2049", op: q, out: true, in: h1(`modelSource="fetched"`, "modelsFetchedAt=1", "modelCount=2049")},
		{name: "header enabled count 513", op: q, out: true, in: h1("enabledModelIdCount=513")},
		{name: "header last test status", op: q, out: true, in: h1(`lastTest={"status":"ok","checkedAt":"x"}`)},
		{name: "header last test checkedAt empty", op: q, out: true, in: h1(`lastTest={"status":"verified","checkedAt":""}`)},
		{name: "header last test checkedAt 129", op: q, out: true,
			in: h1(`lastTest={"status":"verified","checkedAt":` + cfgStr(strings.Repeat("c", 129)) + `}`)},
		{name: "header last test error class", op: q, out: true, in: h1(`lastTest={"status":"error","checkedAt":"x","errorClass":"dns"}`)},
		{name: "header last test extra key", op: q, out: true, in: h1(`lastTest={"status":"error","checkedAt":"x","message":"m"}`)},
		{name: "header last test null", op: q, out: true, in: h1(`lastTest=null`)},

		{name: "enabled item index 512", op: q, out: true, in: one(`{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":512,"modelId":"m"}`)},
		{name: "enabled item empty id", op: q, out: true, in: one(`{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":0,"modelId":""}`)},
		{name: "enabled item id 513", op: q, out: true,
			in: one(`{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":0,"modelId":` + cfgStr(strings.Repeat("m", 513)) + `}`)},
		{name: "enabled item extra key", op: q, out: true, in: one(`{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":0,"modelId":"m","x":1}`)},
		{name: "model item index 2048", op: q, out: true, in: one(`{"kind":"model","connectionIndex":0,"itemIndex":2048,"model":{"id":"m"}}`)},
		{name: "model item missing model", op: q, out: true, in: one(`{"kind":"model","connectionIndex":0,"itemIndex":0}`)},
		{name: "model extra key", op: q, out: true, in: model(`{"id":"m","x":1}`)},
		{name: "model id empty", op: q, out: true, in: model(`{"id":""}`)},
		{name: "model display name 513", op: q, out: true, in: model(`{"id":"m","displayName":` + cfgStr(strings.Repeat("d", 513)) + `}`)},
		{name: "model display name null", op: q, out: true, in: model(`{"id":"m","displayName":null}`)},
		{name: "model api protocol", op: q, out: true, in: model(`{"id":"m","apiProtocol":"gemini"}`)},
		{name: "model context window 0", op: q, out: true, in: model(`{"id":"m","contextWindow":0}`)},
		{name: "model max output negative", op: q, out: true, in: model(`{"id":"m","maxOutputTokens":-5}`)},
		{name: "model max output unsafe", op: q, out: true, in: model(`{"id":"m","maxOutputTokens":9007199254740992}`)},
		{name: "model capability unknown", op: q, out: true, in: model(`{"id":"m","capabilities":{"audio":true}}`)},
		{name: "model capability non-bool", op: q, out: true, in: model(`{"id":"m","capabilities":{"chat":1}}`)},
		{name: "model capabilities null", op: q, out: true, in: model(`{"id":"m","capabilities":null}`)},

		{name: "create extra key", op: cr, in: cfgEdit(t, cfgCreate(cfgDraft), "x=1")},
		{name: "create missing revision", op: cr, in: `{"connection":` + cfgDraft + `}`},
		{name: "create revision fractional", op: cr, in: cfgEdit(t, cfgCreate(cfgDraft), "expectedCatalogRevision=0.5")},
		{name: "create connection null", op: cr, in: cfgCreate("null")},
		{name: "draft missing enabled", op: cr, in: draft("-enabled")},
		{name: "draft extra key", op: cr, in: draft(`models=[]`)},
		{name: "draft slug one char", op: cr, in: draft(`slug="a"`)},
		{name: "draft slug leading hyphen", op: cr, in: draft(`slug="-ab"`)},
		{name: "draft slug trailing hyphen", op: cr, in: draft(`slug="ab-"`)},
		{name: "draft slug underscore", op: cr, in: draft(`slug="a_b"`)},
		{name: "draft slug uppercase", op: cr, in: draft(`slug="AB"`)},
		{name: "draft slug 65", op: cr, in: draft("slug=" + cfgStr("a-"+strings.Repeat("9", 63)))},
		{name: "draft slug number", op: cr, in: draft("slug=12")},
		{name: "draft name 257", op: cr, in: draft("name=" + cfgStr(strings.Repeat("n", 257)))},
		{name: "draft provider unknown", op: cr, in: draft(`providerType="OpenAI"`)},
		{name: "draft enabled null", op: cr, in: draft("enabled=null")},
		{name: "draft 65 ids", op: cr, in: draft("enabledModelIds=" + cfgStrings(cfgDistinct(65, 4)...))},
		{name: "draft duplicate ids", op: cr, in: draft(`enabledModelIds=["a","b","a"]`)},
		{name: "draft empty id", op: cr, in: draft(`enabledModelIds=[""]`)},
		{name: "draft id 513", op: cr, in: draft("enabledModelIds=" + cfgStrings(strings.Repeat("m", 513)))},
		{name: "draft ids not strings", op: cr, in: draft(`enabledModelIds=[1]`)},
		{name: "draft base url null", op: cr, in: draft("baseUrl=null")},
		{name: "draft base url number", op: cr, in: draft("baseUrl=1")},
		{name: "draft base url 2049", op: cr, in: draft(`providerType="groq"`, "baseUrl="+cfgStr("https://x.example/"+strings.Repeat("p", 2049-18)))},
		{name: "draft base url canonical too long", op: cr,
			in: draft(`providerType="groq"`, "baseUrl="+cfgStr("https://x.example/"+strings.Repeat("ä", 700)))},
		{name: "draft base url ftp", op: cr, in: draft(`baseUrl="ftp://x.example/"`)},
		{name: "draft base url relative", op: cr, in: draft(`baseUrl="/v1"`)},
		{name: "draft base url credentials", op: cr, in: draft(`baseUrl="https://k:s@x.example/"`)},
		{name: "draft base url query", op: cr, in: draft(`baseUrl="https://x.example/v1?x"`)},
		{name: "draft base url fragment", op: cr, in: draft(`baseUrl="https://x.example/v1#"`)},
		{name: "draft oauth override", op: cr, in: draft(`providerType="github-copilot"`, `baseUrl="https://x.example/"`)},

		{name: "update missing changes", op: up, in: `{"expected":` + cfgBasis + `}`},
		{name: "update expected revision 0", op: up, in: cfgEdit(t, cfgUpdate(cfgChanges), "expected/revision=0")},
		{name: "update expected not uuid", op: up, in: cfgEdit(t, cfgUpdate(cfgChanges), `expected/connectionId="my-openai"`)},
		{name: "update expected extra key", op: up, in: cfgEdit(t, cfgUpdate(cfgChanges), `expected/slug="a"`)},
		{name: "changes slug", op: up, in: changes(`slug="ab"`)},
		{name: "changes missing name", op: up, in: changes("-name")},
		{name: "changes 65 ids", op: up, in: changes("enabledModelIds=" + cfgStrings(cfgDistinct(65, 4)...))},
		{name: "changes duplicate ids", op: up, in: changes(`enabledModelIds=["x","x"]`)},
		{name: "changes base url invalid", op: up, in: changes(`baseUrl="mailto:a@b"`)},

		{name: "remove missing expected", op: rm, in: `{}`},
		{name: "remove expected null", op: rm, in: `{"expected":null}`},
		{name: "remove extra key", op: rm, in: `{"expected":` + cfgBasis + `,"x":1}`},
		{name: "set default missing target", op: sd, in: `{"expectedCatalogRevision":1}`},
		{name: "set default empty model", op: sd, in: `{"expectedCatalogRevision":1,"target":{"connectionId":"` + cfgUUID1 + `","modelId":""}}`},
		{name: "set default model 513", op: sd,
			in: `{"expectedCatalogRevision":1,"target":{"connectionId":"` + cfgUUID1 + `","modelId":` + cfgStr(strings.Repeat("m", 513)) + `}}`},
		{name: "set default target extra key", op: sd, in: `{"expectedCatalogRevision":1,"target":{"connectionId":"` + cfgUUID1 + `","modelId":"m","x":1}}`},

		{name: "create committed missing connection", op: cr, out: true, in: `{"kind":"committed","catalogRevision":6}`},
		{name: "create exists bad slug", op: cr, out: true, in: `{"kind":"connection_exists","slug":"Bad Slug"}`},
		{name: "create stale", op: cr, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":null}`},
		{name: "update conflict", op: up, out: true, in: `{"kind":"revision_conflict","expectedRevision":1,"actualRevision":2}`},
		{name: "update stale missing actual", op: up, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `}`},
		{name: "update stale expected null", op: up, out: true, in: `{"kind":"connection_stale","expected":null,"actual":null}`},
		{name: "update stale actual revision 0", op: up, out: true,
			in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":{"connectionId":"` + cfgUUID1 + `","revision":0}}`},
		{name: "update invalid default null", op: up, out: true, in: `{"kind":"invalid_default_target","target":null}`},
		{name: "remove committed with connection", op: rm, out: true, in: `{"kind":"committed","catalogRevision":1,"connection":` + cfgBasis + `}`},
		{name: "remove invalid default", op: rm, out: true, in: `{"kind":"invalid_default_target","target":` + cfgTgt + `}`},
		{name: "set default stale", op: sd, out: true, in: `{"kind":"connection_stale","expected":` + cfgBasis + `,"actual":null}`},
		{name: "set default committed negative", op: sd, out: true, in: `{"kind":"committed","catalogRevision":-1}`},
		{name: "set default kind missing", op: sd, out: true, in: `{"catalogRevision":1}`},
		{name: "set default result array", op: sd, out: true, in: `[{"kind":"committed","catalogRevision":1}]`},
	}
	cfgCheckInvalid(t, cases)
}

func cfgPage129Items(t testing.TB) []string {
	items := []string{cfgEdit(t, cfgHeader1, "connectionIndex=0")}
	for i := range 128 {
		items = append(items, `{"kind":"enabled_model_id","connectionIndex":0,"itemIndex":`+strconv.Itoa(i)+`,"modelId":"m"}`)
	}
	return items
}

func TestCatalogPageSizeBound(t *testing.T) {
	// Enabled model id items of up to 512 characters, the last one sized so
	// that the page encodes to exactly the limit.
	page := CatalogPage{Revision: 1, ConnectionCount: 1}
	size := func() int {
		n, err := EncodedSize(page)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; size() < ConnectionCatalogPageMaxBytes; i++ {
		page.Items = append(page.Items, CatalogEnabledModelIDItem{ItemIndex: int64(i), ModelID: strings.Repeat("m", 512)})
	}
	last := page.Items[len(page.Items)-1].(CatalogEnabledModelIDItem)
	last.ModelID = last.ModelID[:512-(size()-ConnectionCatalogPageMaxBytes)]
	page.Items[len(page.Items)-1] = last
	b, err := Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != ConnectionCatalogPageMaxBytes {
		t.Fatalf("constructed page has %d bytes", len(b))
	}
	got, err := cfgDecode(t, OpConnectionCatalogQuery, true, string(b))
	if err != nil {
		t.Fatalf("page at the limit: %v", err)
	}
	if !reflect.DeepEqual(got, page) {
		t.Fatalf("decoded page differs")
	}
	last.ModelID += "m"
	page.Items[len(page.Items)-1] = last
	b, _ = Marshal(page)
	_, err = cfgDecode(t, OpConnectionCatalogQuery, true, string(b))
	cfgWantInvalidFrame(t, "page one byte over", err)
}

func TestCatalogDecodedTypes(t *testing.T) {
	got, err := cfgDecode(t, OpConnectionCatalogQuery, true, cfgFullPage)
	if err != nil {
		t.Fatal(err)
	}
	page, ok := got.(CatalogPage)
	if !ok {
		t.Fatalf("decoded %T", got)
	}
	yes, no := true, false
	name := "GPT-4o"
	fetched := int64(1700000000000)
	want := CatalogPage{
		Revision:        7,
		DefaultTarget:   &ConnectionTarget{ConnectionID: cfgUUID1, ModelID: "gpt-4o"},
		ConnectionCount: 2,
		Items: []CatalogItem{
			CatalogConnectionHeader{ConnectionIndex: 0, ConnectionID: cfgUUID1, Revision: 3, Slug: "my-openai", Name: "Work",
				ProviderType: "openai", BaseURL: "https://proxy.example/v1", Enabled: true, ModelSource: ModelSourceFetched,
				ModelsFetchedAt: &fetched, LastTest: &ConnectionTestSummary{Status: ConnectionTestError, CheckedAt: "2024-01-01T00:00:00Z", ErrorClass: "timeout"},
				EnabledModelIDCount: 2, ModelCount: 2},
			CatalogEnabledModelIDItem{ConnectionIndex: 0, ItemIndex: 0, ModelID: "gpt-4o"},
			CatalogEnabledModelIDItem{ConnectionIndex: 0, ItemIndex: 1, ModelID: "o3"},
			CatalogModelItem{ConnectionIndex: 0, ItemIndex: 0, Model: ConnectionModel{ID: "gpt-4o", DisplayName: &name,
				APIProtocol: APIProtocolOpenAIChat, ContextWindow: 128000, MaxOutputTokens: 16384,
				Capabilities: &ModelCapabilities{Chat: &yes, Vision: &yes, Reasoning: &no, FunctionCalling: &yes, ImageGeneration: &no}}},
			CatalogModelItem{ConnectionIndex: 0, ItemIndex: 1, Model: ConnectionModel{ID: "o3"}},
			CatalogConnectionHeader{ConnectionIndex: 1, ConnectionID: cfgUUID2, Revision: 1, Slug: "local", ProviderType: "ollama"},
		},
	}
	if !reflect.DeepEqual(page, want) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", page, want)
	}

	got, err = cfgDecode(t, OpConnectionCatalogCreate, false, cfgCreate(cfgDraft))
	if err != nil {
		t.Fatal(err)
	}
	wantIn := CatalogCreateInput{ExpectedCatalogRevision: 5, Connection: ConnectionDraft{Slug: "my-openai", ProviderType: "openai",
		Enabled: true, EnabledModelIDs: []string{"gpt-4o", "o3"}}}
	if !reflect.DeepEqual(got, wantIn) {
		t.Fatalf("decoded %#v", got)
	}
}

func TestCompareCatalogPositions(t *testing.T) {
	order := []CatalogCursor{
		{ConnectionIndex: 0, Part: CatalogPartConnection, ItemIndex: 9},
		{ConnectionIndex: 0, Part: CatalogPartEnabledModelID, ItemIndex: 0},
		{ConnectionIndex: 0, Part: CatalogPartEnabledModelID, ItemIndex: 511},
		{ConnectionIndex: 0, Part: CatalogPartModel, ItemIndex: 0},
		{ConnectionIndex: 0, Part: CatalogPartModel, ItemIndex: 1},
		{ConnectionIndex: 1, Part: CatalogPartConnection},
	}
	for i := range order {
		for j := range order {
			got := CompareCatalogPositions(order[i], order[j])
			want := cmpInt64(int64(i), int64(j))
			if (got < 0) != (want < 0) || (got == 0) != (want == 0) {
				t.Errorf("Compare(%v, %v) = %d, want sign of %d", order[i], order[j], got, want)
			}
		}
	}
	// The connection part ignores ItemIndex, and encodes without it.
	b, _ := Marshal(CatalogCursor{ConnectionIndex: 2, Part: CatalogPartConnection, ItemIndex: 5})
	if string(b) != `{"connectionIndex":2,"part":"connection"}` {
		t.Errorf("cursor encodes as %s", b)
	}
}

func TestProviderRegistry(t *testing.T) {
	if len(ProviderTypes) != 55 {
		t.Fatalf("%d provider types", len(ProviderTypes))
	}
	seen := map[string]bool{}
	counts := map[string]int{}
	for _, p := range ProviderTypes {
		if seen[p] {
			t.Errorf("duplicate provider %s", p)
		}
		seen[p] = true
		counts[ProviderAuth(p)]++
	}
	want := map[string]int{AuthAPIKey: 48, AuthOAuthToken: 4, AuthNone: 2, AuthOptionalAPIKey: 1}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("auth kinds %v, want %v", counts, want)
	}
	for p, auth := range map[string]string{
		"anthropic": AuthAPIKey, "openai": AuthAPIKey, "gemini-cli": AuthOAuthToken, "github-copilot": AuthOAuthToken,
		"claude-subscription": AuthOAuthToken, "openai-codex": AuthOAuthToken, "ollama": AuthNone, "lm-studio": AuthNone,
		"localai": AuthOptionalAPIKey, "ollama-cloud": AuthAPIKey, "acme": "",
	} {
		if got := ProviderAuth(p); got != auth {
			t.Errorf("ProviderAuth(%q) = %q, want %q", p, got, auth)
		}
	}
	for p := range ProviderDefaultBaseURL {
		if ProviderAuth(p) == "" {
			t.Errorf("default base URL for unknown provider %s", p)
		}
	}
}

func TestIsUUIDAndSlug(t *testing.T) {
	for s, want := range map[string]bool{
		cfgUUID1: true, cfgUUID2: true, "00000000-0000-1000-8000-000000000000": true,
		"00000000-0000-8000-b000-000000000000": true, "00000000-0000-0000-8000-000000000000": false,
		"00000000-0000-9000-8000-000000000000": false, "00000000-0000-1000-7000-000000000000": false,
		"00000000-0000-1000-c000-000000000000": false, "00000000-0000-1000-8000-00000000000g": false,
		"00000000-0000-1000-8000-0000000000000": false, "000000000000-1000-8000-0000-00000000": false, "": false,
	} {
		if IsUUID(s) != want {
			t.Errorf("IsUUID(%q) = %t", s, !want)
		}
	}
	for s, want := range map[string]bool{
		"ab": true, "a-b": true, "0-9": true, "a--b": true, strings.Repeat("a", 64): true,
		"a": false, "-a": false, "a-": false, "A": false, "a b": false, strings.Repeat("a", 65): false, "é-a": false,
	} {
		if IsConnectionSlug(s) != want {
			t.Errorf("IsConnectionSlug(%q) = %t", s, !want)
		}
	}
}

func TestNormalizeConnectionBaseURL(t *testing.T) {
	cases := []struct {
		raw, provider, want string
		fail                bool
	}{
		{raw: "https://api.openai.com/v1", provider: "openai", want: ""},
		{raw: " HTTPS://API.OPENAI.COM:443/v1 ", provider: "openai", want: ""},
		{raw: "https://api.openai.com/v1/", provider: "openai", want: "https://api.openai.com/v1/"},
		{raw: "https://api.anthropic.com", provider: "anthropic", want: ""},
		{raw: "https://api.anthropic.com/", provider: "anthropic", want: ""},
		{raw: "https://api.anthropic.com/v1", provider: "anthropic", want: "https://api.anthropic.com/v1"},
		{raw: "http://localhost:11434/v1", provider: "ollama", want: ""},
		{raw: "http://localhost:1234/v1", provider: "lm-studio", want: ""},
		{raw: "http://127.0.0.1:1234/v1", provider: "lm-studio", want: "http://127.0.0.1:1234/v1"},
		{raw: "https://api.openai.com/v1", provider: "openai-compatible", want: "https://api.openai.com/v1"},
		{raw: "https://api.deepseek.com", provider: "deepseek", want: "https://api.deepseek.com/"},
		{raw: "https://api.openai.com/v1", provider: "", want: "https://api.openai.com/v1"},
		{raw: "", provider: "github-copilot", want: ""},
		{raw: "https://proxy.example", provider: "github-copilot", fail: true},
		{raw: "https://proxy.example", provider: "claude-subscription", fail: true},
		{raw: "https://proxy.example", provider: "openai-codex", fail: true},
		{raw: "https://proxy.example", provider: "gemini-cli", fail: true},
		{raw: "https://proxy.example", provider: "", want: "https://proxy.example/"},
		{raw: "ftp://proxy.example", provider: "openai", fail: true},
	}
	for _, c := range cases {
		got, err := NormalizeConnectionBaseURL(c.raw, c.provider)
		if c.fail {
			if err == nil {
				t.Errorf("NormalizeConnectionBaseURL(%q, %q) = %q, want an error", c.raw, c.provider, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("NormalizeConnectionBaseURL(%q, %q) = %q, %v; want %q", c.raw, c.provider, got, err, c.want)
		}
	}
}
