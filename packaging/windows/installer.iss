; Inno Setup script: the Windows installer for the one-folder bundle dist\moss-voice\.
;
; Built on Windows (PyInstaller does not cross-compile; docs/windows.md):
;   python packaging\build.py                                   (bundle, self-test, then this)
;   iscc /DAppVersion=0.1.0 packaging\windows\installer.iss     (this step alone)
; The version comes from app.__version__: packaging\build.py passes it as /DAppVersion.
; Compiled with Inno Setup 6.4 (the npm package `innosetup` 6.4.1, the same compiler in CI and
; under wine: `make installer-check` compiles this script with a stand-in payload, installs,
; checks and uninstalls it in a throwaway wine prefix).
;
; Output: dist\moss-voice-<version>-windows-x64-setup.exe plus its slices -1.bin, -2.bin, ...
; (DiskSpanning; a CUDA build of torch makes the bundle several GB and GitHub takes no release
; file over 2 GiB). A missing or half-downloaded slice would make Setup ask "Please insert
; Disk N" (even with /VERYSILENT, so an unattended install hangs); InitializeSetup below checks
; every slice first and explains what is missing instead (docs/windows.md, "Slices").
; tests/test_packaging.py checks that the names, icon and paths here agree with
; packaging/moss-voice.spec.

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z (packaging\build.py does, from app.__version__)
#endif
#if Ver < EncodeVer(6, 4, 0) || Ver >= EncodeVer(6, 5, 0)
  #error The slice check in [Code] reads Inno Setup 6.4's slice format; use Inno Setup 6.4 (npm innosetup 6.4.1) or check the format of this version first
#endif

#define AppName "MOSS Voice"
#define AppExeName "moss-voice.exe"
#ifndef BundleDir
  #define BundleDir "..\..\dist\moss-voice"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif
; Below 2 GiB (2,147,483,648 bytes), GitHub's limit per release file, with room to spare.
#ifndef DiskSliceSize
  #define DiskSliceSize "2100000000"
#endif
#define DiskClusterSize "512"
#define AppIcon "..\..\resources\icons\moss-voice.ico"
#define OutputName "moss-voice-" + AppVersion + "-windows-x64-setup"

[Setup]
; A fixed id: a newer installer replaces the installed version in place.
AppId={{2AA39949-8DA5-4BFD-92B0-B13B3D3E5031}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=MOSS Voice contributors
DefaultDirName={code:DefaultInstallDir}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
; Per-user by default (no administrator needed); the dialog offers all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#OutputDir}
OutputBaseFilename={#OutputName}
SetupIconFile={#AppIcon}
UninstallDisplayIcon={app}\{#AppExeName}
UninstallDisplayName={#AppName}
Uninstallable=yes
WizardStyle=modern
Compression=lzma2
; Not solid: a multi-GB solid block needs GBs of memory to build and to install.
SolidCompression=no
DiskSpanning=yes
DiskSliceSize={#DiskSliceSize}
DiskClusterSize={#DiskClusterSize}
SlicesPerDisk=1

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#BundleDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\{#AppName}"; Filename: "{app}\{#AppExeName}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExeName}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExeName}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

; The uninstaller removes the program folder. Settings, downloaded models and logs live in
; %LOCALAPPDATA%\moss-voice and are kept (a reinstall finds them; delete that folder to remove
; them too).

[Code]
const
  SliceBytes = {#DiskSliceSize};
  ClusterBytes = {#DiskClusterSize};
  SliceID = 'idska32';  { then #26 and the slice's total size (4 bytes, little-endian) }
  ChunkHeaderBytes = 4;  { a slice may end this much early when the next chunk's header did not fit }

function DefaultInstallDir(Param: String): String;
begin
  try
    Result := ExpandConstant('{autopf}');
  except
    { Wine has no per-user Program Files folder; Windows always has one. }
    Result := ExpandConstant('{localappdata}\Programs');
  end;
  Result := Result + '\{#AppName}';
end;

function ReadSlice(const Path: String; var FileBytes, HeaderBytes: Int64): Boolean;
var
  Stream: TFileStream;
  Header: AnsiString;
begin
  Result := False;
  try
    Stream := TFileStream.Create(Path, fmOpenRead or fmShareDenyWrite);
    try
      FileBytes := Stream.Size;
      SetLength(Header, 12);
      if (FileBytes >= 12) and (Stream.Read(Header, 12) = 12) and
         (Copy(Header, 1, 8) = SliceID + #26) then begin
        HeaderBytes := Ord(Header[9]) + Ord(Header[10]) * 256 + Ord(Header[11]) * 65536 +
          Int64(Ord(Header[12])) * 16777216;
        Result := True;
      end;
    finally
      Stream.Free;
    end;
  except
    Result := False;
  end;
end;

function FileBytesOf(const Path: String): Int64;
var
  Stream: TFileStream;
begin
  Stream := TFileStream.Create(Path, fmOpenRead or fmShareDenyWrite);
  try
    Result := Stream.Size;
  finally
    Stream.Free;
  end;
end;

function RoundUpToCluster(const Bytes: Int64): Int64;
begin
  Result := ((Bytes + ClusterBytes - 1) div ClusterBytes) * ClusterBytes;
end;

{ Every slice this setup needs, next to it, whole. Slices are filled to SliceBytes (the first
  one shares its "disk" with the setup program), so a full slice means another one follows;
  each slice's header holds its own size, which a cut-off download does not reach. }
function SliceProblem(): String;
var
  Folder, Prefix, Name, Parts: String;
  Number: Integer;
  FileBytes, HeaderBytes, Budget: Int64;
  More: Boolean;
begin
  Result := '';
  Folder := ExtractFilePath(ExpandConstant('{srcexe}'));
  Prefix := ChangeFileExt(ExtractFileName(ExpandConstant('{srcexe}')), '');
  Number := 1;
  More := True;
  while More do begin
    Name := Prefix + '-' + IntToStr(Number) + '.bin';
    if Number = 1 then Parts := Name else Parts := Parts + ', ' + Name;
    if not FileExists(Folder + Name) then begin
      Result := Format('the installer part %s is missing from %s.', [Name, Folder]);
      if (CompareText(Prefix, '{#OutputName}') <> 0) and
         FileExists(Folder + '{#OutputName}-' + IntToStr(Number) + '.bin') then
        Result := Result + #13#10#13#10 + Format('The setup program was renamed: rename it ' +
          'back to {#OutputName}.exe (its parts are found by its name).', [])
      else
        Result := Result + #13#10#13#10 + Format('The installer comes in several files that ' +
          'must lie in the same folder: %s.exe and %s (and any further parts). Download the ' +
          'missing ones from the same release page into that folder, then start the setup ' +
          'program again.', [Prefix, Parts]);
      Exit;
    end;
    if not ReadSlice(Folder + Name, FileBytes, HeaderBytes) then begin
      Result := Format('the installer part %s is damaged (it does not start like an ' +
        'installer part). Download it again from the same release page.', [Name]);
      Exit;
    end;
    if FileBytes <> HeaderBytes then begin
      Result := Format('the installer part %s was only partly downloaded (%d of %d ' +
        'bytes). Download it again from the same release page into %s.', [Name, FileBytes,
        HeaderBytes, Folder]);
      Exit;
    end;
    Budget := SliceBytes;
    if Number = 1 then
      Budget := SliceBytes - RoundUpToCluster(FileBytesOf(ExpandConstant('{srcexe}')));
    More := FileBytes >= Budget - ChunkHeaderBytes;
    Number := Number + 1;
  end;
  Log(Format('Installer parts: %d, all present and whole (%s).', [Number - 1, Parts]));
end;

function InitializeSetup(): Boolean;
var
  Problem: String;
begin
  Problem := SliceProblem();
  Result := Problem = '';
  if not Result then begin
    Log('Setup cannot start: ' + Problem);
    SuppressibleMsgBox('{#AppName} cannot be installed yet: ' + Problem, mbCriticalError,
      MB_OK, IDOK);
  end;
end;
