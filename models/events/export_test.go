package events

// SubjectHeader is subjectHeader, for the external tests.
var SubjectHeader = subjectHeader
