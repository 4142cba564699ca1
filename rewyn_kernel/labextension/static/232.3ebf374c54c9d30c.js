"use strict";(self.rspackChunkrewyn_kernel=self.rspackChunkrewyn_kernel||[]).push([[232],{14(e,r,t){var n=t(15),o=t.n(n),a=t(16),i=(t.n(a))()(o());i.push([e.id,`/* The sandbox event line (src/view.ts). Colours come from the JupyterLab theme. */
.rewyn-Event {
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color2);
  padding: 1px 0;
}

.rewyn-Event-line {
  cursor: pointer;
  display: flex;
  flex-wrap: wrap;
  gap: 6px;
  align-items: center;
}

/* Long values wrap inside the output area instead of widening it. */
.rewyn-Event-line > span {
  min-width: 0;
  overflow-wrap: anywhere;
}

.rewyn-Event-status {
  font-weight: 600;
  padding: 0 6px;
  border-radius: var(--jp-border-radius);
  border: 1px solid currentcolor;
}

.rewyn-Event-status[data-tone='ok'] {
  color: var(--jp-success-color1);
}

.rewyn-Event-status[data-tone='warn'] {
  color: var(--jp-warn-color1);
}

.rewyn-Event-status[data-tone='error'] {
  color: var(--jp-error-color1);
}

.rewyn-Event-badge {
  color: var(--jp-warn-color1);
  border: 1px solid var(--jp-warn-color1);
  border-radius: 8px;
  padding: 0 6px;
}

.rewyn-Event-rows {
  display: grid;
  grid-template-columns: max-content 1fr;
  gap: 1px 12px;
  margin: 4px 0 2px 18px;
}

.rewyn-Event-rows dt {
  font-weight: 600;
}

.rewyn-Event-rows dd {
  margin: 0;
  overflow-wrap: anywhere;
}
`,""]),t.d(r,{},{A:i})},16(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var t="",n=void 0!==r[5];return r[4]&&(t+="@supports (".concat(r[4],") {")),r[2]&&(t+="@media ".concat(r[2]," {")),n&&(t+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),t+=e(r),n&&(t+="}"),r[2]&&(t+="}"),r[4]&&(t+="}"),t}).join("")},r.i=function(e,t,n,o,a){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(n)for(var s=0;s<this.length;s++){var c=this[s][0];null!=c&&(i[c]=!0)}for(var p=0;p<e.length;p++){var u=[].concat(e[p]);n&&i[u[0]]||(void 0!==a&&(void 0===u[5]||(u[1]="@layer".concat(u[5].length>0?" ".concat(u[5]):""," {").concat(u[1],"}")),u[5]=a),t&&(u[2]&&(u[1]="@media ".concat(u[2]," {").concat(u[1],"}")),u[2]=t),o&&(u[4]?(u[1]="@supports (".concat(u[4],") {").concat(u[1],"}"),u[4]=o):u[4]="".concat(o)),r.push(u))}},r}},15(e){e.exports=function(e){return e[1]}},8(e){var r=[];function t(e){for(var t=-1,n=0;n<r.length;n++)if(r[n].identifier===e){t=n;break}return t}function n(e,n){for(var o={},a=[],i=0;i<e.length;i++){var s=e[i],c=n.base?s[0]+n.base:s[0],p=o[c]||0,u="".concat(c," ").concat(p);o[c]=p+1;var l=t(u),d={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==l)r[l].references++,r[l].updater(d);else{var f=function(e,r){var t=r.domAPI(r);return t.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&t.update(e=r):t.remove()}}(d,n);n.byIndex=i,r.splice(i,0,{identifier:u,updater:f,references:1})}a.push(u)}return a}e.exports=function(e,o){var a=n(e=e||[],o=o||{});return function(e){e=e||[];for(var i=0;i<a.length;i++){var s=t(a[i]);r[s].references--}for(var c=n(e,o),p=0;p<a.length;p++){var u=t(a[p]);0===r[u].references&&(r[u].updater(),r.splice(u,1))}a=c}}},10(e){var r={};e.exports=function(e,t){var n=function(e){if(void 0===r[e]){var t=document.querySelector(e);if(window.HTMLIFrameElement&&t instanceof window.HTMLIFrameElement)try{t=t.contentDocument.head}catch(e){t=null}r[e]=t}return r[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(t)}},12(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},11(e,r,t){e.exports=function(e){var r=t.nc;r&&e.setAttribute("nonce",r)}},9(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(t){var n,o,a;n="",t.supports&&(n+="@supports (".concat(t.supports,") {")),t.media&&(n+="@media ".concat(t.media," {")),(o=void 0!==t.layer)&&(n+="@layer".concat(t.layer.length>0?" ".concat(t.layer):""," {")),n+=t.css,o&&(n+="}"),t.media&&(n+="}"),t.supports&&(n+="}"),(a=t.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(n,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},13(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}},7(e,r,t){var n=t(8),o=t.n(n),a=t(9),i=t.n(a),s=t(10),c=t.n(s),p=t(11),u=t.n(p),l=t(12),d=t.n(l),f=t(13),v=t.n(f),m=t(14),y={};y.styleTagTransform=v(),y.setAttributes=u(),y.insert=c().bind(null,"head"),y.domAPI=i(),y.insertStyleElement=d(),o()(m.A,y),m.A&&m.A.locals&&m.A.locals}}]);