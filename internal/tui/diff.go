package tui

import (
	"fmt"

	"github.com/maka-agent/maka/protocol"
)

// pathPreview renders what a Write or Edit would write: the content of a
// Write, or a unified diff of an Edit's old and new strings.
func pathPreview(r protocol.PathReview) []string {
	var out []string
	switch {
	case r.Content != nil:
		out = append(out, fmt.Sprintf("content (%d bytes):", r.Content.Bytes))
		for _, l := range r.Content.Lines {
			out = append(out, "  "+l)
		}
		if r.Content.Truncated {
			out = append(out, "  … (more not shown)")
		}
	case r.OldString != nil || r.NewString != nil:
		var old, new protocol.ReviewLinesPreview
		if r.OldString != nil {
			old = *r.OldString
		}
		if r.NewString != nil {
			new = *r.NewString
		}
		out = append(out, "--- "+r.Path, "+++ "+r.Path)
		out = append(out, unifiedDiff(old.Lines, new.Lines)...)
		if old.Truncated || new.Truncated {
			out = append(out, "… (more not shown)")
		}
	}
	return out
}

// unifiedDiff is the line diff of a and b as one hunk: common lines with
// a space, removed with -, added with +. The inputs are bounded previews,
// so the quadratic table stays small.
func unifiedDiff(a, b []string) []string {
	n, m := len(a), len(b)
	// lcs[i][j] is the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	out := []string{fmt.Sprintf("@@ -1,%d +1,%d @@", n, m)}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, " "+a[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "-"+a[i])
			i++
		default:
			out = append(out, "+"+b[j])
			j++
		}
	}
	return out
}
