//go:build !race

package vgpu

// raceDetector reports whether the tests run under the race detector.
const raceDetector = false
