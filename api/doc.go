// Package api is Tessera's wire contract: the resource names users request, the
// annotation keys the scheduler, the node agent and users exchange, the typed node
// inventory and pod assignment, and their versioned codecs. It also reads and writes
// the formats of Volcano's deviceshare and the HAMi volcano device plugin so that
// Tessera can run beside them during a migration.
//
// The package holds no Kubernetes client code; it may use Kubernetes API types.
// Every decoder is fuzzed and reports errors that quote the offending field.
package api

import "errors"

// ErrInvalid is wrapped by every decoding and validation error in this package, so
// callers can tell malformed input from other failures with errors.Is.
var ErrInvalid = errors.New("invalid")

// ErrUnsupportedVersion is wrapped when a document carries a version this build cannot read.
var ErrUnsupportedVersion = errors.New("unsupported version")
