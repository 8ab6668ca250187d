package scannerapi

// UnpackReplies is the plugin's decoding of a packed reply batch, for the
// tests that hold it to the host's encoding (pluginhost.ReplyWriter).
var UnpackReplies = unpackReplies

// MatchKeyPatternSteps is MatchKeyPattern with the steps it took.
var MatchKeyPatternSteps = matchKeyPattern
