package tools

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fakeAsker records the questions it is asked and answers with answers or
// err.
type fakeAsker struct {
	toolUseID string
	got       []Question
	answers   []*string
	err       error
}

func (a *fakeAsker) AskQuestions(_ context.Context, toolUseID string, qs []Question) ([]*string, error) {
	a.toolUseID, a.got = toolUseID, qs
	return a.answers, a.err
}

func strp(s string) *string { return &s }

func TestAskUserQuestion(t *testing.T) {
	tool := NewAskUserQuestion()
	if tool.Name() != NameAskUserQuestion || tool.PermissionRequired() || tool.ActivityKind() != ActivityTool {
		t.Fatalf("tool identity: %s %v %s", tool.Name(), tool.PermissionRequired(), tool.ActivityKind())
	}
	if !json.Valid(tool.Parameters()) {
		t.Fatal("parameters are not JSON")
	}
	args := `{"questions":[{"question":"Which DB?","options":[{"label":"sqlite","description":"embedded"},{"label":"postgres"}]},` +
		`{"question":"Ship now?","options":[{"label":"yes"},{"label":"no"}]}]}`

	t.Run("answers", func(t *testing.T) {
		asker := &fakeAsker{answers: []*string{strp("sqlite"), nil}}
		env := newEnv(t)
		env.Questions = asker
		res := run(t, tool, env, args)
		mustOK(t, res)
		want := []Question{
			{Question: "Which DB?", Options: []QuestionOption{{Label: "sqlite", Description: "embedded"}, {Label: "postgres"}}},
			{Question: "Ship now?", Options: []QuestionOption{{Label: "yes"}, {Label: "no"}}},
		}
		if asker.toolUseID != env.ToolUseID || !reflect.DeepEqual(asker.got, want) {
			t.Fatalf("asked %q %+v", asker.toolUseID, asker.got)
		}
		c := content(t, res)
		value, _ := json.Marshal(c["value"])
		if c["kind"] != "json" || string(value) != `{"answers":[{"answer":"sqlite","question":"Which DB?"},{"answer":null,"question":"Ship now?"}]}` {
			t.Fatalf("content = %s", res.Content)
		}
		if !strings.Contains(res.ModelText, "1. Which DB?\n   Answer: sqlite") || !strings.Contains(res.ModelText, "2. Ship now?\n   (no answer)") {
			t.Fatalf("model text = %q", res.ModelText)
		}
	})
	t.Run("no client", func(t *testing.T) {
		mustError(t, run(t, tool, newEnv(t), args), "No client can answer questions in this session")
	})
	t.Run("closed unanswered", func(t *testing.T) {
		env := newEnv(t)
		env.Questions = &fakeAsker{err: errors.New("the turn was stopped")}
		mustError(t, run(t, tool, env, args), "not answered: the turn was stopped")
	})
	t.Run("wrong answer count", func(t *testing.T) {
		env := newEnv(t)
		env.Questions = &fakeAsker{answers: []*string{strp("x")}}
		mustError(t, run(t, tool, env, args), "got 1 answers for 2 questions")
	})

	q := func(question string, labels ...string) map[string]any {
		opts := []map[string]any{}
		for _, l := range labels {
			opts = append(opts, map[string]any{"label": l})
		}
		return map[string]any{"question": question, "options": opts}
	}
	for name, tc := range map[string]struct {
		args any
		want string
	}{
		"missing questions":  {`{}`, `missing required argument "questions"`},
		"no questions":       {map[string]any{"questions": []any{}}, "ask 1 to 3 questions, not 0"},
		"four questions":     {map[string]any{"questions": []any{q("a", "x", "y"), q("b", "x", "y"), q("c", "x", "y"), q("d", "x", "y")}}, "not 4"},
		"one option":         {map[string]any{"questions": []any{q("a", "x")}}, "give 2 or 3 options, not 1"},
		"four options":       {map[string]any{"questions": []any{q("a", "w", "x", "y", "z")}}, "not 4"},
		"duplicate labels":   {map[string]any{"questions": []any{q("a", "x", "x")}}, `label "x" is used twice`},
		"empty question":     {map[string]any{"questions": []any{q("", "x", "y")}}, "question must not be empty"},
		"long label":         {map[string]any{"questions": []any{q("a", "x", strings.Repeat("l", QuestionLabelMaxBytes+1))}}, "at most 256"},
		"unknown key":        {`{"questions":[{"question":"a","options":[{"label":"x"},{"label":"y"}],"multi":true}]}`, `unknown argument "multi"`},
		"option without key": {`{"questions":[{"question":"a","options":[{"label":"x"},{"description":"y"}]}]}`, `missing required argument "label"`},
	} {
		t.Run(name, func(t *testing.T) {
			asker := &fakeAsker{}
			env := newEnv(t)
			env.Questions = asker
			mustError(t, run(t, tool, env, tc.args), tc.want)
			if asker.got != nil {
				t.Fatal("invalid questions were asked")
			}
		})
	}
}
