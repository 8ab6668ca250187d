package wire

// MinAPIVersion is the oldest contract version this SDK still runs: a
// host built with it launches plugins built against any version from
// MinAPIVersion to scannerapi.APIVersion, and Serve serves scanners that
// declare one of them. pluginhost exports it; scannerapi's Info check
// reads it here.
const MinAPIVersion = 1
