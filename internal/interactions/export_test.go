package interactions

// SetBeforeTimeout makes c run f when a permission wait timed out, before
// its timeout is committed (tests order a racing answer).
func SetBeforeTimeout(c *Authority, f func()) { c.beforeTimeout = f }
