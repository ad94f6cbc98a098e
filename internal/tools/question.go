package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// NameAskUserQuestion is the name of the question tool.
const NameAskUserQuestion = "AskUserQuestion"

// Question tool limits (bytes are UTF-8 bytes).
const (
	QuestionMinCount            = 1
	QuestionMaxCount            = 3
	QuestionMinOptions          = 2
	QuestionMaxOptions          = 3
	QuestionMaxBytes            = 1024
	QuestionLabelMaxBytes       = 256
	QuestionDescriptionMaxBytes = 512
)

// Question is one question put to the user, with 2–3 options whose labels
// are unique.
type Question struct {
	Question string
	Options  []QuestionOption
}

// QuestionOption is one suggested answer; Description may be empty.
type QuestionOption struct {
	Label       string
	Description string
}

// QuestionAsker asks the user questions on behalf of a tool call and waits
// for the answers: one per question, nil for a question left unanswered.
// It fails when the questions cannot be asked or are closed unanswered
// (the turn stopped) and when ctx ends.
type QuestionAsker interface {
	AskQuestions(ctx context.Context, toolUseID string, questions []Question) ([]*string, error)
}

// NewAskUserQuestion returns the AskUserQuestion tool: the model asks the
// user 1–3 multiple-choice questions (through Env.Questions) and reads the
// answers.
func NewAskUserQuestion() Tool { return askUserQuestionTool{} }

type askUserQuestionTool struct{}

func (askUserQuestionTool) Name() string { return NameAskUserQuestion }

func (askUserQuestionTool) Description() string {
	return "Ask the user 1 to 3 questions when you need a decision or information only they have. " +
		"Each question offers 2 or 3 options with unique labels (and an optional description); " +
		"the user may pick one or answer in their own words, or leave a question unanswered. " +
		"The call waits for the answers."
}

func (askUserQuestionTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"questions":{"type":"array","minItems":1,"maxItems":3,` +
		`"items":{"type":"object","properties":{` +
		`"question":{"type":"string","description":"The question, complete and specific."},` +
		`"options":{"type":"array","minItems":2,"maxItems":3,"items":{"type":"object","properties":{` +
		`"label":{"type":"string","description":"Short answer text, unique within the question."},` +
		`"description":{"type":"string","description":"What choosing this option means."}},` +
		`"required":["label"],"additionalProperties":false}}},` +
		`"required":["question","options"],"additionalProperties":false}}},` +
		`"required":["questions"],"additionalProperties":false}`)
}

func (askUserQuestionTool) PermissionRequired() bool { return false }
func (askUserQuestionTool) ActivityKind() string     { return ActivityTool }

type questionsArgs struct {
	Questions []json.RawMessage `json:"questions"`
}

type questionArgs struct {
	Question *string           `json:"question"`
	Options  []json.RawMessage `json:"options"`
}

type optionArgs struct {
	Label       *string `json:"label"`
	Description *string `json:"description"`
}

// questionAnswer is one entry of the result value.
type questionAnswer struct {
	Question string  `json:"question"`
	Answer   *string `json:"answer"`
}

func (askUserQuestionTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	qs, err := parseQuestions(raw)
	if err != nil {
		return invalidArgs(NameAskUserQuestion, err), nil
	}
	if env.Questions == nil {
		return ErrorResult("No client can answer questions in this session"), nil
	}
	answers, err := env.Questions.AskQuestions(ctx, env.ToolUseID, qs)
	if err != nil {
		return ErrorResult("The questions were not answered: " + err.Error()), nil
	}
	if len(answers) != len(qs) {
		return ErrorResult(fmt.Sprintf("The questions were not answered: got %d answers for %d questions", len(answers), len(qs))), nil
	}
	value := make([]questionAnswer, len(qs))
	var b strings.Builder
	b.WriteString("The user answered:")
	for i, q := range qs {
		value[i] = questionAnswer{Question: q.Question, Answer: answers[i]}
		fmt.Fprintf(&b, "\n%d. %s\n   ", i+1, q.Question)
		if answers[i] == nil {
			b.WriteString("(no answer)")
		} else {
			b.WriteString("Answer: " + *answers[i])
		}
	}
	res := JSONResult(struct {
		Answers []questionAnswer `json:"answers"`
	}{value})
	if !res.IsError {
		res.ModelText = b.String()
	}
	return res, nil
}

// parseQuestions decodes and checks the tool's arguments.
func parseQuestions(raw json.RawMessage) ([]Question, error) {
	var a questionsArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Questions == nil {
		return nil, fmt.Errorf("missing required argument %q", "questions")
	}
	if n := len(a.Questions); n < QuestionMinCount || n > QuestionMaxCount {
		return nil, fmt.Errorf("ask %d to %d questions, not %d", QuestionMinCount, QuestionMaxCount, n)
	}
	out := make([]Question, 0, len(a.Questions))
	for i, rq := range a.Questions {
		var qa questionArgs
		if err := decodeArgs(rq, &qa); err != nil {
			return nil, fmt.Errorf("question %d: %w", i+1, err)
		}
		if err := requireString("question", qa.Question); err != nil {
			return nil, fmt.Errorf("question %d: %w", i+1, err)
		}
		if err := checkText("question", *qa.Question, QuestionMaxBytes); err != nil {
			return nil, fmt.Errorf("question %d: %w", i+1, err)
		}
		if n := len(qa.Options); n < QuestionMinOptions || n > QuestionMaxOptions {
			return nil, fmt.Errorf("question %d: give %d or %d options, not %d", i+1, QuestionMinOptions, QuestionMaxOptions, n)
		}
		q := Question{Question: *qa.Question, Options: make([]QuestionOption, 0, len(qa.Options))}
		for j, ro := range qa.Options {
			var oa optionArgs
			if err := decodeArgs(ro, &oa); err != nil {
				return nil, fmt.Errorf("question %d option %d: %w", i+1, j+1, err)
			}
			if err := requireString("label", oa.Label); err != nil {
				return nil, fmt.Errorf("question %d option %d: %w", i+1, j+1, err)
			}
			if err := checkText("label", *oa.Label, QuestionLabelMaxBytes); err != nil {
				return nil, fmt.Errorf("question %d option %d: %w", i+1, j+1, err)
			}
			opt := QuestionOption{Label: *oa.Label}
			if oa.Description != nil && *oa.Description != "" {
				if err := checkText("description", *oa.Description, QuestionDescriptionMaxBytes); err != nil {
					return nil, fmt.Errorf("question %d option %d: %w", i+1, j+1, err)
				}
				opt.Description = *oa.Description
			}
			for _, prev := range q.Options {
				if prev.Label == opt.Label {
					return nil, fmt.Errorf("question %d: option label %q is used twice", i+1, opt.Label)
				}
			}
			q.Options = append(q.Options, opt)
		}
		out = append(out, q)
	}
	return out, nil
}

// checkText requires a non-empty valid UTF-8 string of at most maxBytes.
func checkText(name, s string, maxBytes int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s must not be empty", name)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", name)
	case len(s) > maxBytes:
		return fmt.Errorf("%s is %d bytes; at most %d are allowed", name, len(s), maxBytes)
	}
	return nil
}
