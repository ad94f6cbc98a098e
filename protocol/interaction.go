package protocol

import (
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/wireredact"
)

// This file owns the interaction shapes of protocol v0 (pending permission
// prompts and questions, their answers and outcomes) and the codecs of
// interaction.query and interaction.answer.

// Interaction constants and bounds.
const (
	InteractionSchemaVersion        = 1
	InteractionPendingRevision      = 1
	InteractionResolvedRevision     = 2
	InteractionMaxPendingPerSession = 16

	InteractionRequestMaxBytes = 16384 // encoded InteractionRequest
	InteractionAnswerMaxBytes  = 8192  // encoded InteractionAnswer
	InteractionOutcomeMaxBytes = 8192  // encoded InteractionCanonicalOutcome

	InteractionToolUseIDMaxBytes         = 256
	InteractionToolNameMaxBytes          = 256
	InteractionMinQuestions              = 1
	InteractionMaxQuestions              = 3
	InteractionMinOptions                = 2
	InteractionMaxOptions                = 3
	InteractionQuestionMaxBytes          = 1024
	InteractionOptionLabelMaxBytes       = 256
	InteractionOptionDescriptionMaxBytes = 512
	InteractionAnswerTextMaxBytes        = 2048
	InteractionRationaleMaxLen           = 1000 // UTF-16 units

	ReviewCommandMaxBytes         = 8192
	ReviewPathMaxBytes            = 4096
	ReviewTextMaxBytes            = 4096
	ReviewBrowserPreviewMaxBytes  = 2048
	ReviewBrowserWaitMaxSeconds   = 120
	ReviewAdditionalPathsMaxCount = 32
)

// Interaction statuses.
const (
	InteractionStatusPending  = "pending"
	InteractionStatusAnswered = "answered"
	InteractionStatusClosed   = "closed"
)

// Request and answer kinds.
const (
	InteractionKindPermission = "permission"
	InteractionKindQuestion   = "question"
)

// Canonical outcome kinds.
const (
	InteractionOutcomePermissionAnswer = "permission_answer"
	InteractionOutcomeQuestionAnswer   = "question_answer"
	InteractionOutcomeClosure          = "closure"
)

// Closure reasons.
const (
	InteractionClosureTurnStopped   = "turn_stopped"
	InteractionClosureTurnTerminal  = "turn_terminal"
	InteractionClosureTimedOut      = "timed_out" // permission requests only
	InteractionClosureHostRestarted = "host_restarted"
)

// Permission decisions, reviewers and risk levels.
const (
	InteractionDecisionAllow = "allow"
	InteractionDecisionDeny  = "deny"

	InteractionReviewerUser       = "user"
	InteractionReviewerAutoReview = "auto_review"

	InteractionRiskLow      = "low"
	InteractionRiskMedium   = "medium"
	InteractionRiskHigh     = "high"
	InteractionRiskCritical = "critical"
)

// Tool categories (ToolCategory).
const (
	ToolCategoryRead           = "read"
	ToolCategoryWebRead        = "web_read"
	ToolCategoryFileWrite      = "file_write"
	ToolCategoryFSDestructive  = "fs_destructive"
	ToolCategoryShellSafe      = "shell_safe"
	ToolCategoryShellUnsafe    = "shell_unsafe"
	ToolCategoryGitDestructive = "git_destructive"
	ToolCategoryNetworkSend    = "network_send"
	ToolCategoryPrivileged     = "privileged"
	ToolCategoryBrowser        = "browser"
	ToolCategoryComputerUse    = "computer_use"
	ToolCategoryCustomTool     = "custom_tool"
	ToolCategorySubagent       = "subagent"
)

// ToolCategories lists every ToolCategory.
var ToolCategories = []string{
	ToolCategoryRead, ToolCategoryWebRead, ToolCategoryFileWrite, ToolCategoryFSDestructive,
	ToolCategoryShellSafe, ToolCategoryShellUnsafe, ToolCategoryGitDestructive, ToolCategoryNetworkSend,
	ToolCategoryPrivileged, ToolCategoryBrowser, ToolCategoryComputerUse, ToolCategoryCustomTool,
	ToolCategorySubagent,
}

// Permission prompt reasons.
const (
	PermissionReasonShellDangerous        = "shell_dangerous"
	PermissionReasonFileWrite             = "file_write"
	PermissionReasonFSDestructive         = "fs_destructive"
	PermissionReasonNetwork               = "network"
	PermissionReasonGitDestructive        = "git_destructive"
	PermissionReasonPrivileged            = "privileged"
	PermissionReasonBrowser               = "browser"
	PermissionReasonComputerUse           = "computer_use"
	PermissionReasonCustom                = "custom"
	PermissionReasonAdditionalPermissions = "additional_permissions"
	PermissionReasonSandboxEscalation     = "sandbox_escalation"
)

var toolPermissionReasons = []string{
	PermissionReasonShellDangerous, PermissionReasonFileWrite, PermissionReasonFSDestructive,
	PermissionReasonNetwork, PermissionReasonGitDestructive, PermissionReasonPrivileged,
	PermissionReasonBrowser, PermissionReasonComputerUse, PermissionReasonCustom,
}

// PermissionReasonForCategory is the reason a tool_permission prompt must
// carry for a category.
func PermissionReasonForCategory(category string) string {
	switch category {
	case ToolCategoryShellUnsafe:
		return PermissionReasonShellDangerous
	case ToolCategoryFileWrite:
		return PermissionReasonFileWrite
	case ToolCategoryFSDestructive:
		return PermissionReasonFSDestructive
	case ToolCategoryNetworkSend:
		return PermissionReasonNetwork
	case ToolCategoryGitDestructive:
		return PermissionReasonGitDestructive
	case ToolCategoryPrivileged:
		return PermissionReasonPrivileged
	case ToolCategoryBrowser:
		return PermissionReasonBrowser
	case ToolCategoryComputerUse:
		return PermissionReasonComputerUse
	default:
		return PermissionReasonCustom
	}
}

// Permission prompt kinds.
const (
	PromptKindToolPermission        = "tool_permission"
	PromptKindAdditionalPermissions = "additional_permissions"
	PromptKindSandboxEscalation     = "sandbox_escalation"
)

// Sandbox escalation triggers.
const (
	SandboxTriggerProactive     = "proactive"
	SandboxTriggerSandboxDenial = "sandbox_denial"
)

// Tool review kinds.
const (
	ReviewKindCommand     = "command"
	ReviewKindPath        = "path"
	ReviewKindSearch      = "search"
	ReviewKindWeb         = "web"
	ReviewKindTool        = "tool"
	ReviewKindStdin       = "stdin"
	ReviewKindComputerUse = "computer_use"
	ReviewKindBrowser     = "browser"
)

// Browser review actions.
const (
	BrowserActionNavigate = "navigate"
	BrowserActionSnapshot = "snapshot"
	BrowserActionClick    = "click"
	BrowserActionType     = "type"
	BrowserActionWait     = "wait"
	BrowserActionExtract  = "extract"
)

// Browser wait conditions.
const (
	BrowserWaitText     = "text"
	BrowserWaitSelector = "selector"
	BrowserWaitDuration = "duration"
)

// ComputerUseApprovalClasses lists the computer_use review approval classes.
var ComputerUseApprovalClasses = []string{
	"metadata_read", "screenshot_read", "pointer_mutation", "keyboard_mutation", "semantic_mutation",
}

// ---------------------------------------------------------------------------
// Shapes

// InteractionSnapshot is an interaction in any state. Pending: revision 1,
// outcome nil (null). Answered: revision 2, a permission_answer or
// question_answer outcome. Closed: revision 2, a closure outcome.
type InteractionSnapshot struct {
	SchemaVersion int64                        `json:"schemaVersion"`
	InteractionID string                       `json:"interactionId"`
	SessionID     string                       `json:"sessionId"`
	TurnID        string                       `json:"turnId"`
	RunID         string                       `json:"runId"`
	Revision      int64                        `json:"revision"`
	Request       InteractionRequest           `json:"request"`
	Status        string                       `json:"status"`
	Outcome       *InteractionCanonicalOutcome `json:"outcome"`
}

// InteractionAnsweredSnapshot is the result of interaction.answer: a snapshot
// whose status is answered.
type InteractionAnsweredSnapshot InteractionSnapshot

// InteractionProjection is SessionInteractionProjection: {"pending": [...]}.
type InteractionProjection struct {
	Pending []InteractionSnapshot `json:"pending"`
}

// MarshalJSON encodes a nil Pending list as [].
func (p InteractionProjection) MarshalJSON() ([]byte, error) {
	pending := p.Pending
	if pending == nil {
		pending = []InteractionSnapshot{}
	}
	return Marshal(struct {
		Pending []InteractionSnapshot `json:"pending"`
	}{pending})
}

// InteractionQueryInput is the input of interaction.query.
type InteractionQueryInput struct {
	SessionID     string `json:"sessionId"`
	InteractionID string `json:"interactionId"`
}

// InteractionAnswerInput is the input of interaction.answer.
type InteractionAnswerInput struct {
	InteractionID string            `json:"interactionId"`
	Answer        InteractionAnswer `json:"answer"`
}

// InteractionRequest is the union on Kind: permission (ToolUseID, Prompt) or
// question (ToolUseID, Questions).
type InteractionRequest struct {
	Kind      string
	ToolUseID string
	Prompt    PermissionPrompt      // permission
	Questions []InteractionQuestion // question
}

// MarshalJSON encodes the variant selected by Kind.
func (r InteractionRequest) MarshalJSON() ([]byte, error) {
	if r.Kind == InteractionKindQuestion {
		qs := r.Questions
		if qs == nil {
			qs = []InteractionQuestion{}
		}
		return Marshal(struct {
			Kind      string                `json:"kind"`
			ToolUseID string                `json:"toolUseId"`
			Questions []InteractionQuestion `json:"questions"`
		}{r.Kind, r.ToolUseID, qs})
	}
	return Marshal(struct {
		Kind      string           `json:"kind"`
		ToolUseID string           `json:"toolUseId"`
		Prompt    PermissionPrompt `json:"prompt"`
	}{r.Kind, r.ToolUseID, r.Prompt})
}

// Validate reports whether r is a valid InteractionRequest, by encoding it
// and decoding the encoding strictly.
func (r InteractionRequest) Validate() error {
	b, err := Marshal(r)
	if err != nil {
		return &ProtocolError{Code: CodeInvalidFrame, Message: "request: " + err.Error()}
	}
	v, err := Parse(b)
	if err != nil {
		return &ProtocolError{Code: CodeInvalidFrame, Message: "request: " + err.Error()}
	}
	_, err = DecodeInteractionRequest(v)
	return err
}

// InteractionQuestion is one question of a question request.
type InteractionQuestion struct {
	Question string              `json:"question"`
	Options  []InteractionOption `json:"options"`
}

// InteractionOption is one option of a question; an empty Description is
// absent.
type InteractionOption struct {
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
}

// PermissionPrompt is the union on kind: ToolPermissionPrompt,
// AdditionalPermissionsPrompt or SandboxEscalationPrompt.
type PermissionPrompt interface {
	PromptKind() string
	isPermissionPrompt()
}

// ToolPermissionPrompt is the tool_permission prompt.
type ToolPermissionPrompt struct {
	ToolName               string
	Category               string
	Reason                 string
	Review                 ToolReview
	RememberForTurnAllowed bool
}

// PromptKind returns "tool_permission".
func (ToolPermissionPrompt) PromptKind() string  { return PromptKindToolPermission }
func (ToolPermissionPrompt) isPermissionPrompt() {}

// MarshalJSON encodes the prompt with its kind.
func (p ToolPermissionPrompt) MarshalJSON() ([]byte, error) {
	return Marshal(struct {
		Kind                   string     `json:"kind"`
		ToolName               string     `json:"toolName"`
		Category               string     `json:"category"`
		Reason                 string     `json:"reason"`
		Review                 ToolReview `json:"review"`
		RememberForTurnAllowed bool       `json:"rememberForTurnAllowed"`
	}{PromptKindToolPermission, p.ToolName, p.Category, p.Reason, p.Review, p.RememberForTurnAllowed})
}

// AdditionalPermissionsPrompt is the additional_permissions prompt; its
// reason is always "additional_permissions" and its available decisions
// ["allow_once","deny"].
type AdditionalPermissionsPrompt struct {
	ToolName                  string
	Category                  string
	Review                    AdditionalPermissionsReview
	Risk                      AdditionalPermissionsRisk
	AlsoApprovesToolExecution bool
}

// PromptKind returns "additional_permissions".
func (AdditionalPermissionsPrompt) PromptKind() string  { return PromptKindAdditionalPermissions }
func (AdditionalPermissionsPrompt) isPermissionPrompt() {}

// MarshalJSON encodes the prompt with its kind and constant fields.
func (p AdditionalPermissionsPrompt) MarshalJSON() ([]byte, error) {
	return Marshal(struct {
		Kind                      string                      `json:"kind"`
		ToolName                  string                      `json:"toolName"`
		Category                  string                      `json:"category"`
		Reason                    string                      `json:"reason"`
		Review                    AdditionalPermissionsReview `json:"review"`
		Risk                      AdditionalPermissionsRisk   `json:"risk"`
		AlsoApprovesToolExecution bool                        `json:"alsoApprovesToolExecution"`
		AvailableDecisions        []string                    `json:"availableDecisions"`
	}{PromptKindAdditionalPermissions, p.ToolName, p.Category, PermissionReasonAdditionalPermissions,
		p.Review, p.Risk, p.AlsoApprovesToolExecution, oneShotDecisions()})
}

// AdditionalPermissionsReview is the review of an additional_permissions
// prompt; paths and networkEnabled are never both empty/false.
type AdditionalPermissionsReview struct {
	Cwd            string
	Paths          []AdditionalPermissionPath
	NetworkEnabled bool
}

// MarshalJSON encodes the review with its kind; nil Paths encode as [].
func (r AdditionalPermissionsReview) MarshalJSON() ([]byte, error) {
	paths := r.Paths
	if paths == nil {
		paths = []AdditionalPermissionPath{}
	}
	return Marshal(struct {
		Kind           string                     `json:"kind"`
		Cwd            string                     `json:"cwd"`
		Paths          []AdditionalPermissionPath `json:"paths"`
		NetworkEnabled bool                       `json:"networkEnabled"`
	}{PromptKindAdditionalPermissions, r.Cwd, paths, r.NetworkEnabled})
}

// AdditionalPermissionPath is one requested path: access read|write, scope
// exact|subtree.
type AdditionalPermissionPath struct {
	Path   string `json:"path"`
	Access string `json:"access"`
	Scope  string `json:"scope"`
}

// AdditionalPermissionsRisk summarizes an additional_permissions request;
// NetworkEnabled equals the review's.
type AdditionalPermissionsRisk struct {
	OutsideWorkspace  bool `json:"outsideWorkspace"`
	ProtectedMetadata bool `json:"protectedMetadata"`
	NetworkEnabled    bool `json:"networkEnabled"`
}

// SandboxEscalationPrompt is the sandbox_escalation prompt for a Bash
// command: toolName "Bash", reason "sandbox_escalation", a command review
// with cwd, an all-true risk summary and decisions ["allow_once","deny"].
// Category must be the original host's category of Command (the decoders
// check it with internal/bashcategory).
type SandboxEscalationPrompt struct {
	Category                  string
	Command                   string
	Cwd                       string
	Trigger                   string
	AlsoApprovesToolExecution bool
}

// PromptKind returns "sandbox_escalation".
func (SandboxEscalationPrompt) PromptKind() string  { return PromptKindSandboxEscalation }
func (SandboxEscalationPrompt) isPermissionPrompt() {}

type sandboxRisk struct {
	UnsandboxedExecution     bool `json:"unsandboxedExecution"`
	UnrestrictedFileSystem   bool `json:"unrestrictedFileSystem"`
	UnrestrictedNetwork      bool `json:"unrestrictedNetwork"`
	ProtectedMetadataExposed bool `json:"protectedMetadataExposed"`
}

// MarshalJSON encodes the prompt with its kind and constant fields.
func (p SandboxEscalationPrompt) MarshalJSON() ([]byte, error) {
	cwd := p.Cwd
	return Marshal(struct {
		Kind                      string        `json:"kind"`
		ToolName                  string        `json:"toolName"`
		Category                  string        `json:"category"`
		Reason                    string        `json:"reason"`
		Review                    CommandReview `json:"review"`
		Trigger                   string        `json:"trigger"`
		Risk                      sandboxRisk   `json:"risk"`
		AlsoApprovesToolExecution bool          `json:"alsoApprovesToolExecution"`
		AvailableDecisions        []string      `json:"availableDecisions"`
	}{PromptKindSandboxEscalation, "Bash", p.Category, PermissionReasonSandboxEscalation,
		CommandReview{Command: p.Command, Cwd: &cwd}, p.Trigger, sandboxRisk{true, true, true, true},
		p.AlsoApprovesToolExecution, oneShotDecisions()})
}

func oneShotDecisions() []string { return []string{"allow_once", "deny"} }

// ToolReview is the review of a tool_permission prompt, a union on kind:
// CommandReview, PathReview, SearchReview, WebReview, ToolArgumentsReview,
// StdinReview, ComputerUseReview, or one of the browser reviews
// (BrowserNavigateReview, BrowserSnapshotReview, BrowserClickReview,
// BrowserTypeReview, BrowserWaitReview, BrowserDurationWaitReview,
// BrowserExtractReview). Its strings are safe canonical text (see
// IsSafeReviewText).
type ToolReview interface {
	ReviewKind() string
	isToolReview()
}

// BrowserReview is a ToolReview of kind browser.
type BrowserReview interface {
	ToolReview
	BrowserAction() string
}

// ReviewTextPreview is a bounded preview of a longer text: Bytes is the
// original size, Truncated whether Text is shorter than the original.
type ReviewTextPreview struct {
	Text      string `json:"text"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
}

// TerminalSize is a stdin review's terminal size.
type TerminalSize struct {
	Cols int64 `json:"cols"`
	Rows int64 `json:"rows"`
}

// CommandReview reviews a shell command (≤8192 bytes) and its optional cwd
// (≤4096 bytes).
type CommandReview struct {
	Command string  `json:"command"`
	Cwd     *string `json:"cwd,omitempty"`
}

// PathReview reviews a file operation (read|write|edit) on a path. Content
// (write) and OldString/NewString (edit) are optional previews of what the
// call would write (an extension: docs/protocol.md, "Content previews");
// the path is what the review approves.
type PathReview struct {
	Operation string              `json:"operation"`
	Path      string              `json:"path"`
	Content   *ReviewLinesPreview `json:"content,omitempty"`
	OldString *ReviewLinesPreview `json:"oldString,omitempty"`
	NewString *ReviewLinesPreview `json:"newString,omitempty"`
}

// Bounds of a ReviewLinesPreview.
const (
	ReviewPreviewMaxLines = 48
	ReviewPreviewMaxBytes = 2048 // all lines together
)

// ReviewLinesPreview is a bounded preview of a multi-line text, one safe
// review string per line: Bytes is the original size, Truncated whether
// Lines show less than the original.
type ReviewLinesPreview struct {
	Lines     []string `json:"lines"`
	Bytes     int64    `json:"bytes"`
	Truncated bool     `json:"truncated"`
}

// MarshalJSON writes a nil line list as [].
func (p ReviewLinesPreview) MarshalJSON() ([]byte, error) {
	type plain ReviewLinesPreview
	if p.Lines == nil {
		p.Lines = []string{}
	}
	return Marshal(plain(p))
}

// SearchReview reviews a glob or grep search.
type SearchReview struct {
	Operation string  `json:"operation"`
	Pattern   string  `json:"pattern"`
	Root      string  `json:"root"`
	Glob      *string `json:"glob,omitempty"`
}

// WebReview reviews a web fetch (targetKind url) or search (query).
type WebReview struct {
	TargetKind string `json:"targetKind"`
	Target     string `json:"target"`
}

// ToolArgumentsReview reviews a generic tool by a preview of its
// arguments. ServerReadOnlyHint, when present, is what the tool's MCP
// server claims of it (readOnlyHint): shown to the reviewer, never
// trusted by the host.
type ToolArgumentsReview struct {
	Arguments          ReviewTextPreview `json:"arguments"`
	ServerReadOnlyHint *bool             `json:"serverReadOnlyHint,omitempty"`
}

// StdinReview reviews a write to a background process; at least one field
// is set.
type StdinReview struct {
	Ref   *string            `json:"ref,omitempty"`
	Input *ReviewTextPreview `json:"input,omitempty"`
	Size  *TerminalSize      `json:"size,omitempty"`
}

// ComputerUseReview reviews a computer-use action.
type ComputerUseReview struct {
	Action        string  `json:"action"`
	ApprovalClass string  `json:"approvalClass"`
	App           *string `json:"app,omitempty"`
	WindowID      *int64  `json:"windowId,omitempty"`
	ObservationID *string `json:"observationId,omitempty"`
}

// BrowserNavigateReview reviews browser_navigate.
type BrowserNavigateReview struct {
	URL string `json:"url"`
}

// BrowserSnapshotReview reviews browser_snapshot.
type BrowserSnapshotReview struct{}

// BrowserClickReview reviews browser_click.
type BrowserClickReview struct {
	Ref string `json:"ref"`
}

// BrowserTypeReview reviews browser_type; Input.Text may be empty.
type BrowserTypeReview struct {
	Ref    string            `json:"ref"`
	Input  ReviewTextPreview `json:"input"`
	Submit bool              `json:"submit"`
}

// BrowserWaitReview reviews browser_wait for a text or selector
// (0 < TimeoutSeconds ≤ 120).
type BrowserWaitReview struct {
	Condition      string  `json:"condition"`
	Value          string  `json:"value"`
	TimeoutSeconds float64 `json:"timeoutSeconds"`
}

// BrowserDurationWaitReview reviews browser_wait for a duration
// (0 < Seconds ≤ 120).
type BrowserDurationWaitReview struct {
	Seconds float64 `json:"seconds"`
}

// BrowserExtractReview reviews browser_extract; Selector may be empty.
type BrowserExtractReview struct {
	Start    int64   `json:"start"`
	Selector *string `json:"selector,omitempty"`
}

// ReviewKind implementations.
func (CommandReview) ReviewKind() string             { return ReviewKindCommand }
func (PathReview) ReviewKind() string                { return ReviewKindPath }
func (SearchReview) ReviewKind() string              { return ReviewKindSearch }
func (WebReview) ReviewKind() string                 { return ReviewKindWeb }
func (ToolArgumentsReview) ReviewKind() string       { return ReviewKindTool }
func (StdinReview) ReviewKind() string               { return ReviewKindStdin }
func (ComputerUseReview) ReviewKind() string         { return ReviewKindComputerUse }
func (BrowserNavigateReview) ReviewKind() string     { return ReviewKindBrowser }
func (BrowserSnapshotReview) ReviewKind() string     { return ReviewKindBrowser }
func (BrowserClickReview) ReviewKind() string        { return ReviewKindBrowser }
func (BrowserTypeReview) ReviewKind() string         { return ReviewKindBrowser }
func (BrowserWaitReview) ReviewKind() string         { return ReviewKindBrowser }
func (BrowserDurationWaitReview) ReviewKind() string { return ReviewKindBrowser }
func (BrowserExtractReview) ReviewKind() string      { return ReviewKindBrowser }

func (CommandReview) isToolReview()             {}
func (PathReview) isToolReview()                {}
func (SearchReview) isToolReview()              {}
func (WebReview) isToolReview()                 {}
func (ToolArgumentsReview) isToolReview()       {}
func (StdinReview) isToolReview()               {}
func (ComputerUseReview) isToolReview()         {}
func (BrowserNavigateReview) isToolReview()     {}
func (BrowserSnapshotReview) isToolReview()     {}
func (BrowserClickReview) isToolReview()        {}
func (BrowserTypeReview) isToolReview()         {}
func (BrowserWaitReview) isToolReview()         {}
func (BrowserDurationWaitReview) isToolReview() {}
func (BrowserExtractReview) isToolReview()      {}

// BrowserAction implementations.
func (BrowserNavigateReview) BrowserAction() string     { return BrowserActionNavigate }
func (BrowserSnapshotReview) BrowserAction() string     { return BrowserActionSnapshot }
func (BrowserClickReview) BrowserAction() string        { return BrowserActionClick }
func (BrowserTypeReview) BrowserAction() string         { return BrowserActionType }
func (BrowserWaitReview) BrowserAction() string         { return BrowserActionWait }
func (BrowserDurationWaitReview) BrowserAction() string { return BrowserActionWait }
func (BrowserExtractReview) BrowserAction() string      { return BrowserActionExtract }

// interactionMarshalTagged encodes v (a struct without its own MarshalJSON) and puts
// the discriminator members of prefix (e.g. `"kind":"path"`) first.
func interactionMarshalTagged(prefix string, v any) ([]byte, error) {
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(prefix)+2)
	out = append(out, '{')
	out = append(out, prefix...)
	if len(b) > 2 {
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

func reviewKindPrefix(kind string) string { return `"kind":"` + kind + `"` }

func browserReviewPrefix(action string) string {
	return reviewKindPrefix(ReviewKindBrowser) + `,"action":"` + action + `"`
}

// MarshalJSON encodes the review with its kind.
func (r CommandReview) MarshalJSON() ([]byte, error) {
	type plain CommandReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindCommand), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r PathReview) MarshalJSON() ([]byte, error) {
	type plain PathReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindPath), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r SearchReview) MarshalJSON() ([]byte, error) {
	type plain SearchReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindSearch), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r WebReview) MarshalJSON() ([]byte, error) {
	type plain WebReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindWeb), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r ToolArgumentsReview) MarshalJSON() ([]byte, error) {
	type plain ToolArgumentsReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindTool), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r StdinReview) MarshalJSON() ([]byte, error) {
	type plain StdinReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindStdin), plain(r))
}

// MarshalJSON encodes the review with its kind.
func (r ComputerUseReview) MarshalJSON() ([]byte, error) {
	type plain ComputerUseReview
	return interactionMarshalTagged(reviewKindPrefix(ReviewKindComputerUse), plain(r))
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserNavigateReview) MarshalJSON() ([]byte, error) {
	type plain BrowserNavigateReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionNavigate), plain(r))
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserSnapshotReview) MarshalJSON() ([]byte, error) {
	type plain BrowserSnapshotReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionSnapshot), plain(r))
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserClickReview) MarshalJSON() ([]byte, error) {
	type plain BrowserClickReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionClick), plain(r))
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserTypeReview) MarshalJSON() ([]byte, error) {
	type plain BrowserTypeReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionType), plain(r))
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserWaitReview) MarshalJSON() ([]byte, error) {
	type plain BrowserWaitReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionWait), plain(r))
}

// MarshalJSON encodes the review with its kind, action and condition.
func (r BrowserDurationWaitReview) MarshalJSON() ([]byte, error) {
	return Marshal(struct {
		Kind      string  `json:"kind"`
		Action    string  `json:"action"`
		Condition string  `json:"condition"`
		Seconds   float64 `json:"seconds"`
	}{ReviewKindBrowser, BrowserActionWait, BrowserWaitDuration, r.Seconds})
}

// MarshalJSON encodes the review with its kind and action.
func (r BrowserExtractReview) MarshalJSON() ([]byte, error) {
	type plain BrowserExtractReview
	return interactionMarshalTagged(browserReviewPrefix(BrowserActionExtract), plain(r))
}

// InteractionAnswer is the union on Kind: permission (Decision,
// RememberForTurn; deny requires RememberForTurn false) or question
// (Answers: one entry per question, nil for an unanswered one).
type InteractionAnswer struct {
	Kind            string
	Decision        string
	RememberForTurn bool
	Answers         []*string
}

// MarshalJSON encodes the variant selected by Kind.
func (a InteractionAnswer) MarshalJSON() ([]byte, error) {
	if a.Kind == InteractionKindQuestion {
		return Marshal(struct {
			Kind    string    `json:"kind"`
			Answers []*string `json:"answers"`
		}{a.Kind, interactionNonNilAnswers(a.Answers)})
	}
	return Marshal(struct {
		Kind            string `json:"kind"`
		Decision        string `json:"decision"`
		RememberForTurn bool   `json:"rememberForTurn"`
	}{a.Kind, a.Decision, a.RememberForTurn})
}

func interactionNonNilAnswers(a []*string) []*string {
	if a == nil {
		return []*string{}
	}
	return a
}

// InteractionCanonicalOutcome is the union on Kind:
//   - permission_answer: Reviewer, CommittedAt, Decision, RememberForTurn and
//     optional Rationale (auto_review only) and RiskLevel ("" = absent);
//   - question_answer: Answers, CommittedAt;
//   - closure: Reason, CommittedAt.
type InteractionCanonicalOutcome struct {
	Kind            string
	Reviewer        string
	CommittedAt     int64
	Decision        string
	RememberForTurn bool
	Rationale       string
	RiskLevel       string
	Answers         []*string
	Reason          string
}

// MarshalJSON encodes the variant selected by Kind.
func (o InteractionCanonicalOutcome) MarshalJSON() ([]byte, error) {
	switch o.Kind {
	case InteractionOutcomeQuestionAnswer:
		return Marshal(struct {
			Kind        string    `json:"kind"`
			Answers     []*string `json:"answers"`
			CommittedAt int64     `json:"committedAt"`
		}{o.Kind, interactionNonNilAnswers(o.Answers), o.CommittedAt})
	case InteractionOutcomeClosure:
		return Marshal(struct {
			Kind        string `json:"kind"`
			Reason      string `json:"reason"`
			CommittedAt int64  `json:"committedAt"`
		}{o.Kind, o.Reason, o.CommittedAt})
	}
	return Marshal(struct {
		Kind            string `json:"kind"`
		Reviewer        string `json:"reviewer"`
		CommittedAt     int64  `json:"committedAt"`
		Decision        string `json:"decision"`
		RememberForTurn bool   `json:"rememberForTurn"`
		Rationale       string `json:"rationale,omitempty"`
		RiskLevel       string `json:"riskLevel,omitempty"`
	}{o.Kind, o.Reviewer, o.CommittedAt, o.Decision, o.RememberForTurn, o.Rationale, o.RiskLevel})
}

// ---------------------------------------------------------------------------
// Rules shared by decoders and the host

// IsSafeReviewText reports whether s may appear in a permission review: valid
// UTF-8 without C0/C1 controls (U+0000–U+001F, U+007F–U+009F), without the
// bidirectional and line-separator characters U+061C, U+200E, U+200F,
// U+2028, U+2029, U+202A–U+202E, U+2066–U+2069, and without anything the
// secret redactor would change. Length bounds are checked separately.
func IsSafeReviewText(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		switch {
		case r >= 0x80 && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029,
			r >= 0x202a && r <= 0x202e,
			r >= 0x2066 && r <= 0x2069:
			return false
		}
		i += size
	}
	return !wireredact.Contains(s)
}

// browserToolActions maps the browser tools to their review action.
var browserToolActions = map[string]string{
	"browser_navigate": BrowserActionNavigate,
	"browser_snapshot": BrowserActionSnapshot,
	"browser_click":    BrowserActionClick,
	"browser_type":     BrowserActionType,
	"browser_wait":     BrowserActionWait,
	"browser_extract":  BrowserActionExtract,
}

// toolPermissionProblem checks the semantic rules of a tool_permission
// prompt (reason = f(category), tool identity); it returns "" when they
// hold, else a description of the first violation.
func toolPermissionProblem(p ToolPermissionPrompt) string {
	if p.Review == nil {
		return "missing review"
	}
	if PermissionReasonForCategory(p.Category) != p.Reason {
		return "reason does not match category"
	}
	wantCategory, wantReview := "", ""
	switch p.ToolName {
	case "Bash":
		r, ok := p.Review.(CommandReview)
		if !ok {
			return "Bash requires a command review"
		}
		if p.Category != bashcategory.Categorize(r.Command) {
			return "Bash category does not match the command"
		}
		return ""
	case "Read":
		wantCategory, wantReview = ToolCategoryRead, ReviewKindPath
	case "Write", "Edit":
		wantCategory, wantReview = ToolCategoryFileWrite, ReviewKindPath
	case "Glob", "Grep":
		wantCategory, wantReview = ToolCategoryRead, ReviewKindSearch
	case "WebFetch", "WebSearch":
		wantCategory, wantReview = ToolCategoryWebRead, ReviewKindWeb
	case "WriteStdin":
		if p.RememberForTurnAllowed {
			return "WriteStdin cannot be remembered for the turn"
		}
		wantCategory, wantReview = ToolCategoryShellUnsafe, ReviewKindStdin
	default:
		if action, ok := browserToolActions[p.ToolName]; ok {
			b, isBrowser := p.Review.(BrowserReview)
			if p.Category != ToolCategoryBrowser || !isBrowser || b.BrowserAction() != action {
				return "review does not match the browser tool"
			}
			return ""
		}
		wantCategory = p.Category
		if p.Category == ToolCategoryComputerUse {
			wantReview = ReviewKindComputerUse
		} else {
			wantReview = ReviewKindTool
		}
	}
	if p.Category != wantCategory || p.Review.ReviewKind() != wantReview {
		return "review does not match the tool identity"
	}
	return ""
}

// rememberEligible reports whether a permission decision (allow or deny) with
// the given rememberForTurn may resolve req.
func rememberEligible(req InteractionRequest, decision string, remember bool) bool {
	if req.Kind != InteractionKindPermission ||
		(decision != InteractionDecisionAllow && decision != InteractionDecisionDeny) {
		return false
	}
	if !remember {
		return true
	}
	p, ok := req.Prompt.(ToolPermissionPrompt)
	return decision == InteractionDecisionAllow && ok && p.RememberForTurnAllowed
}

// OutcomeValidForRequest reports whether out may resolve req: a closure
// resolves any request except that timed_out closes only permission
// requests; permission_answer needs a permission request, question_answer a
// question request with one answer per question; rememberForTurn requires an
// allow on a tool_permission prompt that allows remembering.
func OutcomeValidForRequest(req InteractionRequest, out InteractionCanonicalOutcome) bool {
	switch out.Kind {
	case InteractionOutcomeClosure:
		return req.Kind == InteractionKindPermission ||
			(req.Kind == InteractionKindQuestion && out.Reason != InteractionClosureTimedOut)
	case InteractionOutcomeQuestionAnswer:
		return req.Kind == InteractionKindQuestion && len(out.Answers) == len(req.Questions)
	case InteractionOutcomePermissionAnswer:
		return rememberEligible(req, out.Decision, out.RememberForTurn)
	}
	return false
}

// AnswerAcceptable reports whether ans is acceptable for req under the same
// rules as OutcomeValidForRequest: matching kinds, one answer per question,
// and rememberForTurn only for an allow of a rememberable tool_permission
// prompt.
func AnswerAcceptable(req InteractionRequest, ans InteractionAnswer) bool {
	switch ans.Kind {
	case InteractionKindQuestion:
		return req.Kind == InteractionKindQuestion && len(ans.Answers) == len(req.Questions)
	case InteractionKindPermission:
		return rememberEligible(req, ans.Decision, ans.RememberForTurn)
	}
	return false
}

// EquivalentAnswer reports whether answer repeats the stored outcome: the
// same decision and rememberForTurn for a permission answer, or the same
// answers array for a question answer. A closure has no equivalent answer.
func EquivalentAnswer(outcome InteractionCanonicalOutcome, answer InteractionAnswer) bool {
	switch {
	case outcome.Kind == InteractionOutcomePermissionAnswer && answer.Kind == InteractionKindPermission:
		return outcome.Decision == answer.Decision && outcome.RememberForTurn == answer.RememberForTurn
	case outcome.Kind == InteractionOutcomeQuestionAnswer && answer.Kind == InteractionKindQuestion:
		return interactionAnswersEqual(outcome.Answers, answer.Answers)
	}
	return false
}

// EquivalentOutcome reports whether two outcomes are equivalent for retries:
// same kind and the same decision and rememberForTurn, the same answers, or
// the same closure reason. Commit time, reviewer, rationale and risk level
// are not compared.
func EquivalentOutcome(a, b InteractionCanonicalOutcome) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case InteractionOutcomePermissionAnswer:
		return a.Decision == b.Decision && a.RememberForTurn == b.RememberForTurn
	case InteractionOutcomeQuestionAnswer:
		return interactionAnswersEqual(a.Answers, b.Answers)
	case InteractionOutcomeClosure:
		return a.Reason == b.Reason
	}
	return false
}

func interactionAnswersEqual(a, b []*string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case *a[i] != *b[i]:
			return false
		}
	}
	return true
}

// UserOutcome is the canonical outcome committed for an answer received on
// the wire: reviewer "user", commit time committedAt (Host clock ms), and
// rememberForTurn forced to false for a deny.
func UserOutcome(ans InteractionAnswer, committedAt int64) InteractionCanonicalOutcome {
	if ans.Kind == InteractionKindQuestion {
		answers := make([]*string, len(ans.Answers))
		copy(answers, ans.Answers)
		return InteractionCanonicalOutcome{Kind: InteractionOutcomeQuestionAnswer, Answers: answers, CommittedAt: committedAt}
	}
	return InteractionCanonicalOutcome{
		Kind:            InteractionOutcomePermissionAnswer,
		Reviewer:        InteractionReviewerUser,
		CommittedAt:     committedAt,
		Decision:        ans.Decision,
		RememberForTurn: ans.Decision == InteractionDecisionAllow && ans.RememberForTurn,
	}
}

// ---------------------------------------------------------------------------
// Decoders

// DecodeInteractionRequest strictly decodes an InteractionRequest.
func DecodeInteractionRequest(v Value) (InteractionRequest, error) {
	d := &D{}
	r := decodeInteractionRequest(d, v, "request")
	if d.Failed() {
		return InteractionRequest{}, d.Err()
	}
	return r, nil
}

// DecodeInteractionAnswer strictly decodes an InteractionAnswer.
func DecodeInteractionAnswer(v Value) (InteractionAnswer, error) {
	d := &D{}
	a := decodeInteractionAnswer(d, v, "answer")
	if d.Failed() {
		return InteractionAnswer{}, d.Err()
	}
	return a, nil
}

// DecodeInteractionCanonicalOutcome strictly decodes an
// InteractionCanonicalOutcome (validity against a request is checked by
// OutcomeValidForRequest).
func DecodeInteractionCanonicalOutcome(v Value) (InteractionCanonicalOutcome, error) {
	d := &D{}
	o := decodeInteractionOutcome(d, v, "outcome")
	if d.Failed() {
		return InteractionCanonicalOutcome{}, d.Err()
	}
	return o, nil
}

// DecodeInteractionSnapshot strictly decodes an InteractionSnapshot in any
// state.
func DecodeInteractionSnapshot(v Value) (InteractionSnapshot, error) {
	d := &D{}
	s := decodeInteractionSnapshot(d, v, "snapshot")
	if d.Failed() {
		return InteractionSnapshot{}, d.Err()
	}
	return s, nil
}

func init() {
	registerCodec(OpInteractionQuery,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "sessionId", "interactionId")
			return InteractionQueryInput{SessionID: o.EntityID("sessionId"), InteractionID: o.EntityID("interactionId")}
		},
		func(d *D, v Value) any {
			return decodeInteractionSnapshot(d, v, "result")
		})
	registerCodec(OpInteractionAnswer,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "interactionId", "answer")
			in := InteractionAnswerInput{InteractionID: o.EntityID("interactionId")}
			av, ap := o.Get("answer")
			in.Answer = decodeInteractionAnswer(d, av, ap)
			return in
		},
		func(d *D, v Value) any {
			s := decodeInteractionSnapshot(d, v, "result")
			if !d.Failed() && s.Status != InteractionStatusAnswered {
				d.Fail("result.status", "an interaction.answer result must be answered")
			}
			return InteractionAnsweredSnapshot(s)
		})
}

// decodeInteractionProjection decodes a SessionInteractionProjection whose
// entries must all be pending interactions of sessionID, at most 16, with
// unique interactionIds.
func decodeInteractionProjection(d *D, v Value, path, sessionID string) InteractionProjection {
	out := InteractionProjection{Pending: []InteractionSnapshot{}}
	o := d.Exact(v, path, "pending")
	items, p := o.Array("pending", 0, InteractionMaxPendingPerSession)
	seen := make(map[string]bool, len(items))
	for i, item := range items {
		ip := Index(p, i)
		s := decodeInteractionSnapshot(d, item, ip)
		if d.Failed() {
			return out
		}
		switch {
		case s.Status != InteractionStatusPending:
			d.Fail(ip, "interaction is not pending")
		case s.SessionID != sessionID:
			d.Fail(ip, "interaction belongs to another session")
		case seen[s.InteractionID]:
			d.Fail(ip, "duplicate interactionId %q", s.InteractionID)
		}
		if d.Failed() {
			return out
		}
		seen[s.InteractionID] = true
		out.Pending = append(out.Pending, s)
	}
	return out
}

func decodeInteractionSnapshot(d *D, v Value, path string) InteractionSnapshot {
	o := d.Exact(v, path, "schemaVersion", "interactionId", "sessionId", "turnId", "runId", "revision",
		"request", "status", "outcome")
	s := InteractionSnapshot{
		SchemaVersion: o.SafeInt("schemaVersion", InteractionSchemaVersion, InteractionSchemaVersion),
		InteractionID: o.EntityID("interactionId"),
		SessionID:     o.EntityID("sessionId"),
		TurnID:        o.EntityID("turnId"),
		RunID:         o.EntityID("runId"),
		Revision:      o.SafeInt("revision", InteractionPendingRevision, InteractionResolvedRevision),
	}
	rv, rp := o.Get("request")
	s.Request = decodeInteractionRequest(d, rv, rp)
	s.Status = o.Enum("status", InteractionStatusPending, InteractionStatusAnswered, InteractionStatusClosed)
	if d.Failed() {
		return InteractionSnapshot{}
	}
	if s.Status == InteractionStatusPending {
		if s.Revision != InteractionPendingRevision {
			d.Fail(path+".revision", "a pending interaction must have revision %d", InteractionPendingRevision)
		} else if !o.IsNull("outcome") {
			d.Fail(path+".outcome", "a pending interaction must have a null outcome")
		}
		return s
	}
	if s.Revision != InteractionResolvedRevision {
		d.Fail(path+".revision", "a resolved interaction must have revision %d", InteractionResolvedRevision)
		return InteractionSnapshot{}
	}
	ov, op := o.Get("outcome")
	out := decodeInteractionOutcome(d, ov, op)
	if d.Failed() {
		return InteractionSnapshot{}
	}
	switch {
	case !OutcomeValidForRequest(s.Request, out):
		d.Fail(op, "outcome is not valid for the request")
	case s.Status == InteractionStatusAnswered && out.Kind == InteractionOutcomeClosure:
		d.Fail(op, "an answered interaction needs an answer outcome")
	case s.Status == InteractionStatusClosed && out.Kind != InteractionOutcomeClosure:
		d.Fail(op, "a closed interaction needs a closure outcome")
	}
	s.Outcome = &out
	return s
}

func decodeInteractionRequest(d *D, v Value, path string) InteractionRequest {
	kind := d.Open(v, path).Enum("kind", InteractionKindPermission, InteractionKindQuestion)
	if d.Failed() {
		return InteractionRequest{}
	}
	r := InteractionRequest{Kind: kind}
	if kind == InteractionKindPermission {
		o := d.Exact(v, path, "kind", "toolUseId", "prompt")
		r.ToolUseID = o.StringBytes("toolUseId", 1, InteractionToolUseIDMaxBytes)
		pv, pp := o.Get("prompt")
		r.Prompt = decodePermissionPrompt(d, pv, pp)
	} else {
		o := d.Exact(v, path, "kind", "toolUseId", "questions")
		r.ToolUseID = o.StringBytes("toolUseId", 1, InteractionToolUseIDMaxBytes)
		items, qp := o.Array("questions", InteractionMinQuestions, InteractionMaxQuestions)
		r.Questions = make([]InteractionQuestion, 0, len(items))
		for i, item := range items {
			r.Questions = append(r.Questions, decodeInteractionQuestion(d, item, Index(qp, i)))
		}
	}
	if d.Failed() {
		return InteractionRequest{}
	}
	d.EncodedWithin(r, path, InteractionRequestMaxBytes)
	return r
}

func decodeInteractionQuestion(d *D, v Value, path string) InteractionQuestion {
	o := d.Exact(v, path, "question", "options")
	q := InteractionQuestion{Question: o.StringBytes("question", 1, InteractionQuestionMaxBytes)}
	items, op := o.Array("options", InteractionMinOptions, InteractionMaxOptions)
	q.Options = make([]InteractionOption, 0, len(items))
	for i, item := range items {
		ip := Index(op, i)
		oo := d.Closed(item, ip, []string{"label"}, []string{"description"})
		opt := InteractionOption{Label: oo.StringBytes("label", 1, InteractionOptionLabelMaxBytes)}
		if oo.Has("description") {
			opt.Description = oo.StringBytes("description", 1, InteractionOptionDescriptionMaxBytes)
		}
		if d.Failed() {
			return InteractionQuestion{}
		}
		for _, prev := range q.Options {
			if prev.Label == opt.Label {
				d.Fail(ip+".label", "duplicate option label")
				return InteractionQuestion{}
			}
		}
		q.Options = append(q.Options, opt)
	}
	return q
}

func decodeInteractionAnswer(d *D, v Value, path string) InteractionAnswer {
	kind := d.Open(v, path).Enum("kind", InteractionKindPermission, InteractionKindQuestion)
	if d.Failed() {
		return InteractionAnswer{}
	}
	a := InteractionAnswer{Kind: kind}
	if kind == InteractionKindPermission {
		o := d.Exact(v, path, "kind", "decision", "rememberForTurn")
		a.Decision = o.Enum("decision", InteractionDecisionAllow, InteractionDecisionDeny)
		a.RememberForTurn = o.Bool("rememberForTurn")
		if !d.Failed() && a.Decision == InteractionDecisionDeny && a.RememberForTurn {
			d.Fail(path+".rememberForTurn", "a deny cannot be remembered")
		}
	} else {
		o := d.Exact(v, path, "kind", "answers")
		av, ap := o.Get("answers")
		a.Answers = decodeQuestionAnswers(d, av, ap)
	}
	if d.Failed() {
		return InteractionAnswer{}
	}
	d.EncodedWithin(a, path, InteractionAnswerMaxBytes)
	return a
}

func decodeQuestionAnswers(d *D, v Value, path string) []*string {
	items := d.Array(v, path, InteractionMinQuestions, InteractionMaxQuestions)
	out := make([]*string, len(items))
	for i, item := range items {
		if item.Kind() == KindNull {
			continue
		}
		s := d.StringBytes(item, Index(path, i), 1, InteractionAnswerTextMaxBytes)
		out[i] = &s
	}
	return out
}

func decodeInteractionOutcome(d *D, v Value, path string) InteractionCanonicalOutcome {
	kind := d.Open(v, path).Enum("kind", InteractionOutcomePermissionAnswer, InteractionOutcomeQuestionAnswer,
		InteractionOutcomeClosure)
	if d.Failed() {
		return InteractionCanonicalOutcome{}
	}
	out := InteractionCanonicalOutcome{Kind: kind}
	switch kind {
	case InteractionOutcomePermissionAnswer:
		o := d.Closed(v, path, []string{"kind", "reviewer", "committedAt", "decision", "rememberForTurn"},
			[]string{"rationale", "riskLevel"})
		out.Reviewer = o.Enum("reviewer", InteractionReviewerUser, InteractionReviewerAutoReview)
		out.CommittedAt = o.Count("committedAt")
		out.Decision = o.Enum("decision", InteractionDecisionAllow, InteractionDecisionDeny)
		out.RememberForTurn = o.Bool("rememberForTurn")
		if !d.Failed() && out.Decision == InteractionDecisionDeny && out.RememberForTurn {
			d.Fail(path+".rememberForTurn", "a deny cannot be remembered")
		}
		if o.Has("rationale") {
			if !d.Failed() && out.Reviewer != InteractionReviewerAutoReview {
				d.Fail(path+".rationale", "a rationale is only given by auto_review")
			}
			out.Rationale = o.String("rationale", 1, InteractionRationaleMaxLen)
		}
		if o.Has("riskLevel") {
			out.RiskLevel = o.Enum("riskLevel", InteractionRiskLow, InteractionRiskMedium, InteractionRiskHigh,
				InteractionRiskCritical)
		}
	case InteractionOutcomeQuestionAnswer:
		o := d.Exact(v, path, "kind", "answers", "committedAt")
		av, ap := o.Get("answers")
		out.Answers = decodeQuestionAnswers(d, av, ap)
		out.CommittedAt = o.Count("committedAt")
	default:
		o := d.Exact(v, path, "kind", "reason", "committedAt")
		out.Reason = o.Enum("reason", InteractionClosureTurnStopped, InteractionClosureTurnTerminal,
			InteractionClosureTimedOut, InteractionClosureHostRestarted)
		out.CommittedAt = o.Count("committedAt")
	}
	if d.Failed() {
		return InteractionCanonicalOutcome{}
	}
	d.EncodedWithin(out, path, InteractionOutcomeMaxBytes)
	return out
}

func decodePermissionPrompt(d *D, v Value, path string) PermissionPrompt {
	kind := d.Open(v, path).Enum("kind", PromptKindToolPermission, PromptKindAdditionalPermissions,
		PromptKindSandboxEscalation)
	if d.Failed() {
		return nil
	}
	switch kind {
	case PromptKindToolPermission:
		o := d.Exact(v, path, "kind", "toolName", "category", "reason", "review", "rememberForTurnAllowed")
		p := ToolPermissionPrompt{
			ToolName: o.StringBytes("toolName", 1, InteractionToolNameMaxBytes),
			Category: o.Enum("category", ToolCategories...),
			Reason:   o.Enum("reason", toolPermissionReasons...),
		}
		rv, rp := o.Get("review")
		p.Review = decodeToolReview(d, rv, rp)
		p.RememberForTurnAllowed = o.Bool("rememberForTurnAllowed")
		if d.Failed() {
			return nil
		}
		if problem := toolPermissionProblem(p); problem != "" {
			d.Fail(path, "%s", problem)
			return nil
		}
		return p
	case PromptKindAdditionalPermissions:
		o := d.Exact(v, path, "kind", "toolName", "category", "reason", "review", "risk",
			"alsoApprovesToolExecution", "availableDecisions")
		p := AdditionalPermissionsPrompt{
			ToolName: o.StringBytes("toolName", 1, InteractionToolNameMaxBytes),
			Category: o.Enum("category", ToolCategories...),
		}
		o.Literal("reason", PermissionReasonAdditionalPermissions)
		rv, rp := o.Get("review")
		p.Review = decodeAdditionalReview(d, rv, rp)
		ro := o.Object("risk", []string{"outsideWorkspace", "protectedMetadata", "networkEnabled"}, nil)
		p.Risk = AdditionalPermissionsRisk{
			OutsideWorkspace:  ro.Bool("outsideWorkspace"),
			ProtectedMetadata: ro.Bool("protectedMetadata"),
			NetworkEnabled:    ro.Bool("networkEnabled"),
		}
		p.AlsoApprovesToolExecution = o.Bool("alsoApprovesToolExecution")
		decodeOneShotDecisions(d, o)
		if !d.Failed() && p.Risk.NetworkEnabled != p.Review.NetworkEnabled {
			d.Fail(path+".risk.networkEnabled", "does not match review.networkEnabled")
		}
		if d.Failed() {
			return nil
		}
		return p
	default:
		o := d.Exact(v, path, "kind", "toolName", "category", "reason", "review", "trigger", "risk",
			"alsoApprovesToolExecution", "availableDecisions")
		o.Literal("toolName", "Bash")
		p := SandboxEscalationPrompt{Category: o.Enum("category", ToolCategories...)}
		o.Literal("reason", PermissionReasonSandboxEscalation)
		rv, rp := o.Get("review")
		ro := d.Exact(rv, rp, "kind", "command", "cwd")
		ro.Literal("kind", ReviewKindCommand)
		p.Command = decodeReviewText(d, ro, "command", ReviewCommandMaxBytes, false)
		p.Cwd = decodeReviewText(d, ro, "cwd", ReviewPathMaxBytes, false)
		p.Trigger = o.Enum("trigger", SandboxTriggerProactive, SandboxTriggerSandboxDenial)
		risk := o.Object("risk", []string{"unsandboxedExecution", "unrestrictedFileSystem", "unrestrictedNetwork",
			"protectedMetadataExposed"}, nil)
		for _, k := range []string{"unsandboxedExecution", "unrestrictedFileSystem", "unrestrictedNetwork",
			"protectedMetadataExposed"} {
			if !risk.Bool(k) && !d.Failed() {
				d.Fail(risk.Path()+"."+k, "must be true")
			}
		}
		p.AlsoApprovesToolExecution = o.Bool("alsoApprovesToolExecution")
		decodeOneShotDecisions(d, o)
		if !d.Failed() && p.Category != bashcategory.Categorize(p.Command) {
			d.Fail(path+".category", "does not match the command")
		}
		if d.Failed() {
			return nil
		}
		return p
	}
}

// decodeOneShotDecisions requires availableDecisions to be exactly
// ["allow_once","deny"].
func decodeOneShotDecisions(d *D, o Obj) {
	items, p := o.Array("availableDecisions", 2, 2)
	if len(items) == 2 {
		d.Enum(items[0], Index(p, 0), "allow_once")
		d.Enum(items[1], Index(p, 1), "deny")
	}
}

func decodeAdditionalReview(d *D, v Value, path string) AdditionalPermissionsReview {
	o := d.Exact(v, path, "kind", "cwd", "paths", "networkEnabled")
	o.Literal("kind", PromptKindAdditionalPermissions)
	r := AdditionalPermissionsReview{Cwd: decodeReviewText(d, o, "cwd", ReviewPathMaxBytes, false)}
	items, pp := o.Array("paths", 0, ReviewAdditionalPathsMaxCount)
	r.Paths = make([]AdditionalPermissionPath, 0, len(items))
	for i, item := range items {
		po := d.Exact(item, Index(pp, i), "path", "access", "scope")
		r.Paths = append(r.Paths, AdditionalPermissionPath{
			Path:   decodeReviewText(d, po, "path", ReviewPathMaxBytes, false),
			Access: po.Enum("access", "read", "write"),
			Scope:  po.Enum("scope", "exact", "subtree"),
		})
	}
	r.NetworkEnabled = o.Bool("networkEnabled")
	if !d.Failed() && len(r.Paths) == 0 && !r.NetworkEnabled {
		d.Fail(path, "requests neither paths nor network")
	}
	return r
}

// decodeReviewText decodes a safe canonical review string of at most
// maxBytes UTF-8 bytes, non-empty unless allowEmpty.
func decodeReviewText(d *D, o Obj, key string, maxBytes int, allowEmpty bool) string {
	v, p := o.Get(key)
	return decodeReviewTextValue(d, v, p, maxBytes, allowEmpty)
}

func decodeReviewTextValue(d *D, v Value, path string, maxBytes int, allowEmpty bool) string {
	minBytes := 1
	if allowEmpty {
		minBytes = 0
	}
	s := d.StringBytes(v, path, minBytes, maxBytes)
	if d.Failed() {
		return ""
	}
	if !IsSafeReviewText(s) {
		d.Fail(path, "not safe canonical review text")
		return ""
	}
	return s
}

// decodeOptionalReviewText decodes an optional safe review string.
func decodeOptionalReviewText(d *D, o Obj, key string, maxBytes int, allowEmpty bool) *string {
	if !o.Has(key) {
		return nil
	}
	s := decodeReviewText(d, o, key, maxBytes, allowEmpty)
	return &s
}

// decodeLinesPreview decodes an optional ReviewLinesPreview.
func decodeLinesPreview(d *D, o Obj, key string) *ReviewLinesPreview {
	if !o.Has(key) {
		return nil
	}
	v, p := o.Get(key)
	po := d.Exact(v, p, "lines", "bytes", "truncated")
	lv, lp := po.Get("lines")
	items := d.Array(lv, lp, 0, ReviewPreviewMaxLines)
	out := &ReviewLinesPreview{Lines: make([]string, 0, len(items)), Bytes: po.Count("bytes"), Truncated: po.Bool("truncated")}
	total := 0
	for i, item := range items {
		line := decodeReviewTextValue(d, item, Index(lp, i), ReviewPreviewMaxBytes, true)
		if d.Failed() {
			return nil
		}
		total += len(line)
		out.Lines = append(out.Lines, line)
	}
	if total > ReviewPreviewMaxBytes {
		d.Fail(lp, "preview longer than its bound")
		return nil
	}
	return out
}

func decodeTextPreview(d *D, o Obj, key string, maxBytes int, allowEmpty bool) ReviewTextPreview {
	v, p := o.Get(key)
	po := d.Exact(v, p, "text", "bytes", "truncated")
	return ReviewTextPreview{
		Text:      decodeReviewText(d, po, "text", maxBytes, allowEmpty),
		Bytes:     po.Count("bytes"),
		Truncated: po.Bool("truncated"),
	}
}

func decodeToolReview(d *D, v Value, path string) ToolReview {
	kind := d.Open(v, path).Enum("kind", ReviewKindCommand, ReviewKindPath, ReviewKindSearch, ReviewKindWeb,
		ReviewKindTool, ReviewKindStdin, ReviewKindComputerUse, ReviewKindBrowser)
	if d.Failed() {
		return nil
	}
	var r ToolReview
	switch kind {
	case ReviewKindCommand:
		o := d.Closed(v, path, []string{"kind", "command"}, []string{"cwd"})
		r = CommandReview{
			Command: decodeReviewText(d, o, "command", ReviewCommandMaxBytes, false),
			Cwd:     decodeOptionalReviewText(d, o, "cwd", ReviewPathMaxBytes, false),
		}
	case ReviewKindPath:
		o := d.Closed(v, path, []string{"kind", "operation", "path"}, []string{"content", "oldString", "newString"})
		pr := PathReview{
			Operation: o.Enum("operation", "read", "write", "edit"),
			Path:      decodeReviewText(d, o, "path", ReviewPathMaxBytes, false),
		}
		pr.Content = decodeLinesPreview(d, o, "content")
		pr.OldString = decodeLinesPreview(d, o, "oldString")
		pr.NewString = decodeLinesPreview(d, o, "newString")
		r = pr
	case ReviewKindSearch:
		o := d.Closed(v, path, []string{"kind", "operation", "pattern", "root"}, []string{"glob"})
		r = SearchReview{
			Operation: o.Enum("operation", "glob", "grep"),
			Pattern:   decodeReviewText(d, o, "pattern", ReviewTextMaxBytes, false),
			Root:      decodeReviewText(d, o, "root", ReviewPathMaxBytes, false),
			Glob:      decodeOptionalReviewText(d, o, "glob", ReviewTextMaxBytes, false),
		}
	case ReviewKindWeb:
		o := d.Exact(v, path, "kind", "targetKind", "target")
		r = WebReview{
			TargetKind: o.Enum("targetKind", "url", "query"),
			Target:     decodeReviewText(d, o, "target", ReviewTextMaxBytes, false),
		}
	case ReviewKindTool:
		o := d.Closed(v, path, []string{"kind", "arguments"}, []string{"serverReadOnlyHint"})
		tr := ToolArgumentsReview{Arguments: decodeTextPreview(d, o, "arguments", ReviewTextMaxBytes, true)}
		if o.Has("serverReadOnlyHint") {
			hint := o.Bool("serverReadOnlyHint")
			tr.ServerReadOnlyHint = &hint
		}
		r = tr
	case ReviewKindStdin:
		o := d.Closed(v, path, []string{"kind"}, []string{"ref", "input", "size"})
		s := StdinReview{Ref: decodeOptionalReviewText(d, o, "ref", ReviewTextMaxBytes, false)}
		if o.Has("input") {
			in := decodeTextPreview(d, o, "input", ReviewTextMaxBytes, false)
			s.Input = &in
		}
		if o.Has("size") {
			so := o.Object("size", []string{"cols", "rows"}, nil)
			s.Size = &TerminalSize{Cols: so.PosCount("cols"), Rows: so.PosCount("rows")}
		}
		if !d.Failed() && s.Ref == nil && s.Input == nil && s.Size == nil {
			d.Fail(path, "an empty stdin review")
		}
		r = s
	case ReviewKindComputerUse:
		o := d.Closed(v, path, []string{"kind", "action", "approvalClass"}, []string{"app", "windowId", "observationId"})
		c := ComputerUseReview{
			Action:        decodeReviewText(d, o, "action", ReviewTextMaxBytes, false),
			ApprovalClass: o.Enum("approvalClass", ComputerUseApprovalClasses...),
			App:           decodeOptionalReviewText(d, o, "app", ReviewTextMaxBytes, false),
		}
		if o.Has("windowId") {
			w := o.Count("windowId")
			c.WindowID = &w
		}
		c.ObservationID = decodeOptionalReviewText(d, o, "observationId", ReviewTextMaxBytes, false)
		r = c
	default:
		r = decodeBrowserReview(d, v, path)
	}
	if d.Failed() {
		return nil
	}
	return r
}

func decodeBrowserReview(d *D, v Value, path string) ToolReview {
	action := d.Open(v, path).Enum("action", BrowserActionNavigate, BrowserActionSnapshot, BrowserActionClick,
		BrowserActionType, BrowserActionWait, BrowserActionExtract)
	if d.Failed() {
		return nil
	}
	switch action {
	case BrowserActionNavigate:
		o := d.Exact(v, path, "kind", "action", "url")
		return BrowserNavigateReview{URL: decodeReviewText(d, o, "url", ReviewTextMaxBytes, false)}
	case BrowserActionSnapshot:
		d.Exact(v, path, "kind", "action")
		return BrowserSnapshotReview{}
	case BrowserActionClick:
		o := d.Exact(v, path, "kind", "action", "ref")
		return BrowserClickReview{Ref: decodeReviewText(d, o, "ref", ReviewPathMaxBytes, false)}
	case BrowserActionType:
		o := d.Exact(v, path, "kind", "action", "ref", "input", "submit")
		return BrowserTypeReview{
			Ref:    decodeReviewText(d, o, "ref", ReviewPathMaxBytes, false),
			Input:  decodeTextPreview(d, o, "input", ReviewBrowserPreviewMaxBytes, true),
			Submit: o.Bool("submit"),
		}
	case BrowserActionWait:
		condition := d.Open(v, path).Enum("condition", BrowserWaitText, BrowserWaitSelector, BrowserWaitDuration)
		if condition == BrowserWaitDuration {
			o := d.Exact(v, path, "kind", "action", "condition", "seconds")
			return BrowserDurationWaitReview{Seconds: decodeWaitSeconds(d, o, "seconds")}
		}
		o := d.Exact(v, path, "kind", "action", "condition", "value", "timeoutSeconds")
		w := BrowserWaitReview{
			Condition: condition,
			Value:     decodeReviewText(d, o, "value", ReviewTextMaxBytes, false),
		}
		if !d.Failed() && jsTrim(w.Value) == "" {
			d.Fail(path+".value", "blank wait value")
		}
		w.TimeoutSeconds = decodeWaitSeconds(d, o, "timeoutSeconds")
		return w
	default:
		o := d.Closed(v, path, []string{"kind", "action", "start"}, []string{"selector"})
		return BrowserExtractReview{
			Start:    o.Count("start"),
			Selector: decodeOptionalReviewText(d, o, "selector", ReviewTextMaxBytes, true),
		}
	}
}

// decodeWaitSeconds decodes a number x with 0 < x ≤ 120.
func decodeWaitSeconds(d *D, o Obj, key string) float64 {
	x := o.Number(key)
	if !d.Failed() && (x <= 0 || x > ReviewBrowserWaitMaxSeconds) {
		d.Fail(o.Path()+"."+key, "%v outside (0, %d]", x, ReviewBrowserWaitMaxSeconds)
		return 0
	}
	return x
}
