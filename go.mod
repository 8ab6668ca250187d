module github.com/ffscan/ffscan

go 1.26.8
