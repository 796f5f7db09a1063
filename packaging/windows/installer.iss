; Inno Setup script: the Windows installer for the one-folder bundle dist\moss-voice\.
;
; Built on Windows only (PyInstaller does not cross-compile; README, "Windows installer"):
;   python packaging\build.py                                   (bundle, self-test, then this)
;   iscc /DAppVersion=0.1.0 packaging\windows\installer.iss     (this step alone)
; The version comes from app.__version__: packaging\build.py passes it as /DAppVersion.
; Output: dist\moss-voice-<version>-windows-x64-setup.exe plus its .bin slices (DiskSpanning: a
; CUDA build of torch makes the bundle several GB). tests/test_packaging.py checks that the
; names, icon and paths here agree with packaging/moss-voice.spec.

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z (packaging\build.py does, from app.__version__)
#endif

#define AppName "MOSS Voice"
#define AppExeName "moss-voice.exe"
#define BundleDir "..\..\dist\moss-voice"
#define AppIcon "..\..\resources\icons\moss-voice.ico"
#define OutputName "moss-voice-" + AppVersion + "-windows-x64-setup"

[Setup]
; A fixed id: a newer installer replaces the installed version in place.
AppId={{2AA39949-8DA5-4BFD-92B0-B13B3D3E5031}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=MOSS Voice contributors
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
; Per-user by default (no administrator needed); the dialog offers all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename={#OutputName}
SetupIconFile={#AppIcon}
UninstallDisplayIcon={app}\{#AppExeName}
UninstallDisplayName={#AppName}
Uninstallable=yes
WizardStyle=modern
Compression=lzma2
; Not solid: a multi-GB solid block needs GBs of memory to build and to install.
SolidCompression=no
; Slices of 2.1 GB (setup.exe + .bin files): required above 4.2 GB compressed, and a CUDA
; bundle gets there.
DiskSpanning=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"

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
