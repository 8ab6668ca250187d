// Package codec holds the two encodings of a plugin's callback batch, the
// commands a scanner sends and the replies the host answers: the packed
// form the batch stream and the callback socket carry (packed.go), and the
// protobuf messages of the unary Exec older plugins send (proto.go). Both
// ends of the wire use it, the plugin side (sdk/scannerapi) and the host
// side (sdk/pluginhost), so each encoding and its inverse are written
// once, here, and tested together.
//
// The package knows nothing of the SDK's types, which it cannot import
// (the plugin side imports it): commands are any ~[]string, and a reply
// type R is read and written node by node through a small function each
// side passes (see Node).
package codec

import "strings"

// ValidUTF8 makes s valid UTF-8, replacing invalid bytes with U+FFFD:
// protobuf string fields (error messages, notes, codes) must be valid.
func ValidUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
