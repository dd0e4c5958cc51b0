package fs

import gofs "github.com/hanwen/go-fuse/v2/fs"

// The operations each node and handle type implements, checked at compile
// time.
var (
	_ gofs.NodeGetattrer     = (*dirNode)(nil)
	_ gofs.NodeSetattrer     = (*dirNode)(nil)
	_ gofs.NodeLookuper      = (*dirNode)(nil)
	_ gofs.NodeMkdirer       = (*dirNode)(nil)
	_ gofs.NodeRmdirer       = (*dirNode)(nil)
	_ gofs.NodeUnlinker      = (*dirNode)(nil)
	_ gofs.NodeRenamer       = (*dirNode)(nil)
	_ gofs.NodeCreater       = (*dirNode)(nil)
	_ gofs.NodeStatfser      = (*dirNode)(nil)
	_ gofs.NodeSymlinker     = (*dirNode)(nil)
	_ gofs.NodeLinker        = (*dirNode)(nil)
	_ gofs.NodeMknoder       = (*dirNode)(nil)
	_ gofs.NodeGetxattrer    = (*dirNode)(nil)
	_ gofs.NodeSetxattrer    = (*dirNode)(nil)
	_ gofs.NodeListxattrer   = (*dirNode)(nil)
	_ gofs.NodeRemovexattrer = (*dirNode)(nil)

	_ gofs.NodeGetattrer     = (*fileNode)(nil)
	_ gofs.NodeSetattrer     = (*fileNode)(nil)
	_ gofs.NodeOpener        = (*fileNode)(nil)
	_ gofs.NodeFsyncer       = (*fileNode)(nil)
	_ gofs.NodeFsyncer       = (*dirNode)(nil)
	_ gofs.NodeGetxattrer    = (*fileNode)(nil)
	_ gofs.NodeSetxattrer    = (*fileNode)(nil)
	_ gofs.NodeListxattrer   = (*fileNode)(nil)
	_ gofs.NodeRemovexattrer = (*fileNode)(nil)

	_ gofs.NodeSetattrer = (*ctlDir)(nil)
	_ gofs.NodeSetattrer = (*statsFile)(nil)
	_ gofs.NodeSetattrer = (*mirrorDir)(nil)
	_ gofs.NodeSetattrer = (*wholeFile)(nil)

	_ gofs.FileReader    = (*reader)(nil)
	_ gofs.FileReleaser  = (*reader)(nil)
	_ gofs.FileReader    = (*fixedView)(nil)
	_ gofs.FileReleaser  = (*fixedView)(nil)
	_ gofs.FileWriter    = (*writer)(nil)
	_ gofs.FileReader    = (*writer)(nil)
	_ gofs.FileFlusher   = (*writer)(nil)
	_ gofs.FileReleaser  = (*writer)(nil)
	_ gofs.FileGetattrer = (*writer)(nil)
)
