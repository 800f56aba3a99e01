package blas

// PureGoVariants exposes every pure-Go kernel set usable on this CPU to the
// external tests.
var PureGoVariants = pureGoVariants

// BuildInfo describes the default implementation's configuration.
var BuildInfo = buildInfo
