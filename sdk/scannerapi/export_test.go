package scannerapi

// UnpackReplies is the plugin's decoding of a packed reply batch, for the
// tests that hold it to the host's encoding (pluginhost.ReplyWriter).
var UnpackReplies = unpackReplies

// MatchKeyPattern is what KeyScope.Allows asks of each pattern.
func MatchKeyPattern(pattern, key string) bool {
	ok, _ := matchKeyPattern(pattern, key)
	return ok
}

// MatchKeyPatternSteps is MatchKeyPattern with the steps it took.
var MatchKeyPatternSteps = matchKeyPattern
